//! Steps (DESIGN 4d): a handler that touches several systems resumes after the last step it
//! finished. Each named step's result is journaled in `<inbox>_steps` beside the inbox: an
//! external step once its call returns, a database step on the transaction of its own writes.
//! One run of a message's steps at a time holds it by a lease and a fencing token (the key's
//! protocol, [`guestlist_core::protocol::settle`] and `KeyLeaseRow`); what the journal says of
//! each step asked for is [`guestlist_core::protocol::step_at`].

use std::time::Duration;

use guestlist_core::protocol::{KeyRowView, Settlement, settle};
use guestlist_core::{Claim, HandlerName, MessageId};
use sqlx::Pool;

use super::Inbox;
use super::process::ProcessError;
use crate::backend::Backend;
use crate::backend::statement::Plain;
use crate::backend::steps::{JournalRow, RunRow, StepsSql};
use crate::fencing::new_token;
use crate::{Error, WorkError};

mod mid;
mod retry;
mod run;

pub use mid::MidSteps;
pub use run::{StepError, Steps};

/// The lease of a run of a message's steps unless [`Inbox::step_lease`] sets another.
pub(crate) const DEFAULT_STEP_LEASE: Duration = Duration::from_secs(30);

/// How long a step that meets an outage or a "not yet" is tried again in the process unless
/// [`Inbox::step_retry`] sets another.
pub(crate) const DEFAULT_STEP_RETRY: Duration = Duration::from_secs(10);

/// The most bytes a step's result takes in the journal, serialized as JSON.
pub const MAX_STEP_RESULT: usize = 64 * 1024;

/// What [`Inbox::process_steps`] came to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Stepped<T> {
    /// The steps ran (those an earlier run journaled were replayed, not run), and the final work
    /// committed with the inbox's claim: acknowledge.
    Ran(T),
    /// The message was handled before: nothing ran; acknowledge.
    Duplicate,
    /// Another run holds the message (its lease has `retry_after` left): "not yet", hand the
    /// message back for that long, uncounted.
    InFlight {
        /// When the other run's lease ends.
        retry_after: Duration,
    },
}

/// How a delivery's claim of a message's run ended.
enum Run {
    /// This run holds the message under `token`.
    Holds(i64),
    /// Another run holds it, for this long yet.
    Held(Duration),
}

impl<DB: Backend> Inbox<DB> {
    /// How long a run of a message's steps holds it without renewing (default 30 s). Each
    /// journaled step renews it. A run that dies or stalls holds the message until its lease
    /// ends; then the next delivery takes it over, and the stale run can neither journal nor
    /// commit. Set it above the longest step, calls' timeouts included.
    pub fn step_lease(mut self, lease: Duration) -> Self {
        self.step_lease = lease.max(Duration::from_millis(1));
        self
    }

    /// Whether a handled message's journal is kept (default: no, it goes with the final
    /// commit). Kept, `guestlist history` shows each step of a handled message, and the inbox's
    /// [purge](Self::purge) forgets it once the message was last delivered longer ago than the
    /// retention.
    pub fn keep_journals(mut self, keep: bool) -> Self {
        self.keep_journals = keep;
        self
    }

    /// How long a step whose call meets an outage (the database, or a downstream that cannot be
    /// reached) or a "not yet" (a [`Deferral`](guestlist_core::Deferral): a downstream key in
    /// flight, a 429) is tried again in the process, with backoff, before its error is returned
    /// (default 10 s). A deferral's own wait is honoured. Poison, an error of the step's own, is
    /// never tried again here. Keep it below the [lease](Self::step_lease).
    pub fn step_retry(mut self, bound: Duration) -> Self {
        self.step_retry = bound;
        self
    }

    /// Runs a message's named steps, each once, and then its final work with the inbox's claim
    /// (DESIGN 4d). `work` asks for the steps in order through [`Steps::external`] and
    /// [`Steps::database`]; what it returns is handed to `finish`, which runs on the
    /// transaction that claims `id` for `handler`, as [`Inbox::process`]'s work does.
    ///
    /// A redelivery resumes after the last step journaled: a finished step returns its
    /// journaled result and does not run, and a step that began and left no result runs again
    /// (an external one with the same carried key). Once `finish` committed, the message is a
    /// [`Stepped::Duplicate`] and its journal is gone. While another run holds the message,
    /// the answer is [`Stepped::InFlight`]: hand it back for that long, uncounted.
    ///
    /// A failure of `work` or `finish` is returned as it is (the journal keeps what finished,
    /// and the lease is given back so that a retry resumes at once); a step asked for where the
    /// journal holds another is [`Error::StepChanged`]; a run whose lease ended and was taken
    /// over gets [`Error::RunTakenOver`] at its next journal or commit. Unlike
    /// [`Inbox::process`], nothing here is retried on a deadlock: the next delivery resumes.
    ///
    /// ```no_run
    /// # async fn run(pool: sqlx::PgPool) -> Result<(), Box<dyn std::error::Error>> {
    /// use guestlist_sqlx::{HandlerName, Inbox, MessageId, Stepped};
    ///
    /// let inbox = Inbox::<sqlx::Postgres>::new();
    /// let warehouse = HandlerName::new("warehouse")?;
    /// let event = MessageId::new("evt_9f3k")?;
    /// let done = inbox
    ///     .process_steps(
    ///         &pool,
    ///         &warehouse,
    ///         &event,
    ///         async |steps| {
    ///             // Carries `warehouse:evt_9f3k/charge` to the payments service.
    ///             let charge: String = steps
    ///                 .external("charge", || async { Ok::<_, anyhow::Error>("ch_1".to_owned()) })
    ///                 .await?;
    ///             steps
    ///                 .database("reserve", async |tx| {
    ///                     sqlx::query("UPDATE stock SET held = held + 1 WHERE sku = 'mug'")
    ///                         .execute(&mut *tx)
    ///                         .await
    ///                         .map(drop)
    ///                 })
    ///                 .await?;
    ///             Ok::<_, anyhow::Error>(charge)
    ///         },
    ///         async |tx, charge| {
    ///             sqlx::query("UPDATE orders SET charge = $1 WHERE id = 42")
    ///                 .bind(charge)
    ///                 .execute(&mut *tx)
    ///                 .await?;
    ///             Ok::<_, anyhow::Error>(())
    ///         },
    ///     )
    ///     .await?;
    /// if let Stepped::InFlight { retry_after } = done {
    ///     println!("another consumer runs it; again in {retry_after:?}");
    /// }
    /// # Ok(()) }
    /// ```
    pub async fn process_steps<S, T, E, W, F>(
        &self,
        pool: &Pool<DB>,
        handler: &HandlerName,
        id: &MessageId,
        work: W,
        finish: F,
    ) -> Result<Stepped<T>, ProcessError<E>>
    where
        W: AsyncFnOnce(&mut Steps<'_, DB>) -> Result<S, E>,
        F: AsyncFnOnce(&mut DB::Connection, S) -> Result<T, E>,
        E: WorkError,
    {
        let lease_ms = i64::try_from(self.step_lease.as_millis()).unwrap_or(i64::MAX);
        // A redelivery of a handled message costs one read, no write.
        if self.holds(pool, handler, id).await? {
            return Ok(Stepped::Duplicate);
        }
        let mut conn = pool.acquire().await?;
        let token = match self.claim_run(&mut conn, handler, id, lease_ms).await? {
            Run::Holds(token) => token,
            Run::Held(retry_after) => return Ok(Stepped::InFlight { retry_after }),
        };
        // The inbox is asked again with the journal, once this run holds the message: a run
        // that committed (and forgot its journal) between the first question and the claim
        // would leave this one to run every step again.
        let (handler_str, id_str) = (handler.as_str(), id.as_str());
        let journal = Plain::reading(
            |sql: &StepsSql| &sql.journal,
            (handler_str, id_str, handler_str, id_str),
        );
        let mut journal: Vec<JournalRow> = DB::fetch(&mut conn, &*self.steps, journal).await?;
        if journal.first().is_some_and(|row| row.place < 0) {
            self.settle_journal(&mut conn, handler, id, token).await?;
            return Ok(Stepped::Duplicate);
        }
        journal.retain(|row| row.place > 0);
        drop(conn);
        let mut steps = Steps {
            pool,
            sql: &self.steps,
            handler,
            id,
            token,
            lease_ms,
            retry_for: self.step_retry,
            journal,
            place: 0,
        };
        // The work takes the run; the final commit keeps what it needs to guard it.
        let fence = steps.fence();
        let ran = match work(&mut steps).await {
            Ok(ran) => ran,
            Err(err) => {
                self.give_back(&fence).await;
                return Err(ProcessError::Handler(err));
            }
        };
        let mut tx = DB::begin(pool).await?;
        fence.guard(&mut tx).await?;
        if self.claim(&mut tx, handler, id).await? == Claim::Duplicate {
            tx.rollback().await?;
            return Ok(Stepped::Duplicate);
        }
        let output = match finish(&mut tx, ran).await {
            Ok(output) => output,
            Err(err) => {
                tx.rollback().await?;
                self.give_back(&fence).await;
                return Err(ProcessError::Handler(err));
            }
        };
        self.settle_journal(&mut tx, handler, id, fence.token)
            .await?;
        tx.commit().await.map_err(Error::from_commit)?;
        Ok(Stepped::Ran(output))
    }

    /// What becomes of a handled message's run and journal: forgotten, or (with
    /// [`Inbox::keep_journals`]) kept with the run's lease ended, for the purge to take after the
    /// retention.
    async fn settle_journal(
        &self,
        conn: &mut DB::Connection,
        handler: &HandlerName,
        id: &MessageId,
        token: i64,
    ) -> Result<(), Error> {
        if self.keep_journals {
            return self.end_lease(conn, handler, id, token).await;
        }
        let forget = Plain::new(
            |sql: &StepsSql| &sql.forget,
            (handler.as_str(), id.as_str()),
        );
        DB::run(conn, &*self.steps, forget).await?;
        Ok(())
    }

    /// Ends the lease of the run holding `id` under `token` (none, where another holds it).
    async fn end_lease(
        &self,
        conn: &mut DB::Connection,
        handler: &HandlerName,
        id: &MessageId,
        token: i64,
    ) -> Result<(), Error> {
        let end = Plain::new(
            |sql: &StepsSql| &sql.renew,
            (0_i64, handler.as_str(), id.as_str(), token),
        );
        DB::run(conn, &*self.steps, end).await?;
        Ok(())
    }

    /// Claims the run of `id`'s steps: a new run row, or the take-over of one whose lease ended.
    async fn claim_run(
        &self,
        conn: &mut DB::Connection,
        handler: &HandlerName,
        id: &MessageId,
        lease_ms: i64,
    ) -> Result<Run, Error> {
        let (handler, id) = (handler.as_str(), id.as_str());
        let token = new_token()? as i64;
        let claim = Plain::new(|sql: &StepsSql| &sql.claim, (handler, id, token, lease_ms));
        if DB::inserted(DB::run(conn, &*self.steps, claim).await)? {
            return Ok(Run::Holds(token));
        }
        let run = Plain::reading(|sql: &StepsSql| &sql.run, (handler, id));
        let Some(row): Option<RunRow> = DB::fetch_first(conn, &*self.steps, run).await? else {
            // Forgotten between the insert and the read: the final commit landed just now.
            return Ok(Run::Held(Duration::from_secs(1)));
        };
        let view = KeyRowView {
            same_request: true,
            answered: false,
            lease_left_ms: row.lease_left_ms,
        };
        match settle(view, Some(())) {
            Settlement::TakeOver(()) => {
                let take = Plain::new(
                    |sql: &StepsSql| &sql.take_over,
                    (token, lease_ms, handler, id, row.token),
                );
                if DB::run(conn, &*self.steps, take).await? == 1 {
                    tracing::info!(
                        handler,
                        message_id = id,
                        "a run's lease ended; taking its steps over"
                    );
                    Ok(Run::Holds(token))
                } else {
                    Ok(Run::Held(Duration::from_secs(1)))
                }
            }
            Settlement::InFlight { retry_after_ms } => {
                Ok(Run::Held(Duration::from_millis(retry_after_ms)))
            }
            Settlement::Replay | Settlement::Mismatch => Ok(Run::Held(Duration::from_secs(1))),
        }
    }

    /// Ends the lease of a run whose work failed, so that the message's next delivery resumes
    /// at once instead of waiting it out. Best effort: a lease left runs out by itself.
    async fn give_back(&self, steps: &Steps<'_, DB>) {
        let Ok(mut conn) = steps.pool.acquire().await else {
            return;
        };
        let ended = self
            .end_lease(&mut conn, steps.handler, steps.id, steps.token)
            .await;
        if let Err(err) = ended {
            tracing::debug!(error = %err, "cannot give a failed run's lease back; it runs out by itself");
        }
    }
}
