//! A batch of messages' steps side by side, journaled together (DESIGN 4d): each message's run
//! as on its own, but what each writes goes on the batch's shared transaction
//! ([`crate::steps::group`]), one commit per step of the batch.

use std::sync::Arc;

use guestlist_core::{Claim, HandlerName, MessageId};
use sqlx::Pool;

use super::Stepped;
use super::claims::{Claimed, RoundClaim};
use crate::WorkError;
use crate::backend::Backend;
use crate::inbox::process::ProcessError;
use crate::inbox::{Inbox, count_claims};
use crate::steps::group::Group;
use crate::steps::{RunOf, Steps, end_lease};

impl<DB: Backend> Inbox<DB> {
    /// Runs the steps of a batch of messages side by side, journaled together: each message as
    /// [`Inbox::process_steps`] runs it (its run claimed under a lease, its finished steps
    /// replayed, the rest run and journaled, its final work committed with its claim), but
    /// what the runs write goes on one transaction the batch shares, each run's database step
    /// and final work inside a savepoint of its own. The transaction commits once every run
    /// still going waits for it, so a batch costs one commit per step, not one per step of each
    /// message; a run goes on to its next step only once its last one is committed.
    ///
    /// The messages' external calls run at the same time (a batch of slow calls takes about as
    /// long as one), and the runs are in no order with each other. What each message came to
    /// is returned in the order given. A failure of one message's own (its step, its final
    /// work) is its alone; a failure of the database's on the shared transaction fails every
    /// run with a part on it ([`Error::RolledBackWithBatch`](crate::Error::RolledBackWithBatch)
    /// for the others), and each message's next run resumes after what was committed.
    ///
    /// Each run is given as the message's id with its own `work` and `finish`, as
    /// [`Inbox::process_steps`] takes them (build them per message, owning what they use: a
    /// closure called once per message would make the batch's future not `Send`, a rustc
    /// limitation).
    pub async fn process_steps_batch<S, T, E, W, F>(
        &self,
        pool: &Pool<DB>,
        handler: &HandlerName,
        runs: impl IntoIterator<Item = (MessageId, W, F)>,
    ) -> Vec<Result<Stepped<T>, ProcessError<E>>>
    where
        W: AsyncFnOnce(&mut Steps<DB>) -> Result<S, E>,
        F: AsyncFnOnce(&mut DB::Connection, S) -> Result<T, E>,
        E: WorkError,
    {
        let runs: Vec<(MessageId, W, F)> = runs.into_iter().collect();
        let group = Group::new(
            pool.clone(),
            Arc::clone(&self.steps),
            Arc::clone(&self.sql),
            runs.len(),
        );
        let ids: Vec<&MessageId> = runs.iter().map(|(id, _, _)| id).collect();
        let mut claimed = self.claim_round(pool, handler, &ids).await;
        let runs = runs.into_iter().map(|(id, work, finish)| {
            let group = &group;
            // A message twice in the batch: its second run finds the first holding it.
            let claimed = claimed.remove(id.as_str());
            async move {
                let done = self
                    .run_in_group(pool, group, handler, &id, claimed, work, finish)
                    .await;
                group.leave().await;
                done
            }
        });
        futures_util::future::join_all(runs).await
    }

    /// One message's run of a batch's, on the batch's `group`; `claimed` is its token where
    /// the batch's claims took its run already.
    #[allow(clippy::too_many_arguments)] // the batch's context, then the run's own
    async fn run_in_group<S, T, E, W, F>(
        &self,
        pool: &Pool<DB>,
        group: &Arc<Group<DB>>,
        handler: &HandlerName,
        id: &MessageId,
        claimed: Option<RoundClaim>,
        work: W,
        finish: F,
    ) -> Result<Stepped<T>, ProcessError<E>>
    where
        W: AsyncFnOnce(&mut Steps<DB>) -> Result<S, E>,
        F: AsyncFnOnce(&mut DB::Connection, S) -> Result<T, E>,
        E: WorkError,
    {
        let lease_ms = self.step_lease_ms();
        // No first look at the inbox here: the claims' statement asks it (or the journal's
        // read, where the database claims one at a time).
        let of = RunOf::message(handler, id);
        let claimed = match claimed {
            // A new run row: nothing journaled yet.
            Some(RoundClaim::Fresh(token)) => Claimed::Holds(token, Vec::new()),
            Some(RoundClaim::Handled) => return Ok(Stepped::Duplicate),
            // Handled meanwhile: the new run row goes (or stays, its lease ended).
            Some(RoundClaim::HandledMeanwhile(token)) => {
                let mut part = group.enter(false).await?;
                part.journal(self.settle_pending(&of, token));
                part.keep().await?;
                return Ok(Stepped::Duplicate);
            }
            None => {
                let mut part = group.enter(false).await?;
                let claimed = match self.claim_in(part.conn(), &of, lease_ms).await {
                    Ok(claimed) => claimed,
                    Err(err) => {
                        part.undo().await;
                        return Err(err.into());
                    }
                };
                part.keep().await?;
                claimed
            }
        };
        let (token, journal) = match claimed {
            Claimed::Holds(token, journal) => (token, journal),
            Claimed::Held(retry_after) => return Ok(Stepped::InFlight { retry_after }),
            Claimed::Handled => return Ok(Stepped::Duplicate),
        };
        let mut steps = self.steps_of(pool, of, token, journal, Some(Arc::clone(group)));
        let fence = steps.fence();
        let ran = match work(&mut steps).await {
            Ok(ran) => ran,
            Err(err) => {
                give_back_in(group, &fence).await;
                return Err(ProcessError::Handler(err));
            }
        };
        // The run's guard and the inbox's claim go with the batch's just before the shared
        // commit: a take-over meanwhile fails the guard, a message handled by other means
        // fails the claim, and nothing of the transaction commits.
        let mut part = group.enter(true).await?;
        let output = match finish(part.conn(), ran).await {
            Ok(output) => output,
            Err(err) => {
                part.undo().await;
                give_back_in(group, &fence).await;
                return Err(ProcessError::Handler(err));
            }
        };
        // The journal goes (or stays, its lease ended) with the commit.
        let mut settle = self.settle_pending(&fence.run, fence.token);
        settle.claim = true;
        part.journal(settle);
        match part.keep_claimed().await {
            Ok(true) => {
                count_claims(handler, Claim::Fresh, 1);
                Ok(Stepped::Ran(output))
            }
            Ok(false) => {
                count_claims(handler, Claim::Duplicate, 1);
                give_back_in(group, &fence).await;
                Ok(Stepped::Duplicate)
            }
            Err(err) => {
                // Rolled back with another run's part, say: the next delivery resumes at once.
                give_back_in(group, &fence).await;
                Err(err.into())
            }
        }
    }
}

/// Ends the lease of a run whose work failed, on the batch's transaction, so that the next
/// delivery resumes at once. Best effort: a lease left runs out by itself.
async fn give_back_in<DB: Backend>(group: &Arc<Group<DB>>, steps: &Steps<DB>) {
    let ended = match group.enter(false).await {
        Ok(mut part) => {
            match end_lease::<DB>(part.conn(), &steps.sql, &steps.run, steps.token).await {
                Ok(()) => part.keep().await,
                Err(err) => {
                    part.undo().await;
                    Err(err)
                }
            }
        }
        Err(err) => Err(err),
    };
    if let Err(err) = ended {
        tracing::debug!(error = %err, "cannot give a failed run's lease back; it runs out by itself");
    }
}
