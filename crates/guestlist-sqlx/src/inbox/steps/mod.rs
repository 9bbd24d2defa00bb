//! Steps (DESIGN 4d): a handler that touches several systems resumes after the last step it
//! finished. Each named step's result is journaled in `<inbox>_steps` beside the inbox: an
//! external step once its call returns, a database step on the transaction of its own writes.
//! One run of a message's steps at a time holds it by a lease and a fencing token (the key's
//! protocol, [`guestlist_core::protocol::settle`] and `KeyLeaseRow`); what the journal says of
//! each step asked for is [`guestlist_core::protocol::step_at`].

use std::sync::Arc;
use std::time::Duration;

use guestlist_core::{Claim, HandlerName, MessageId};
use sqlx::Pool;

use self::claims::Claimed;
use super::process::ProcessError;
use super::{Inbox, count_claims};
use crate::backend::Backend;
use crate::backend::statement::Plain;
use crate::backend::steps::JournalRow;
use crate::backend::steps::StepsSql;
use crate::fencing::new_token;
use crate::steps::group::Group;
use crate::steps::pending::{self, Pending};
use crate::steps::{RunOf, Steps, end_lease, forget, give_back};
use crate::{Error, WorkError};

mod batch;
mod claims;
mod mid;

pub use mid::MidSteps;

/// How a run's final commit may end, by what its guard and the inbox's claim found.
enum Settled {
    /// The run holds the message and the claim is new: commit.
    Claimed,
    /// Another run holds the message now: roll back.
    TakenOver,
    /// The inbox held the message already (handled by other means): roll back, a duplicate.
    Handled,
}

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

impl<DB: Backend> Inbox<DB> {
    /// How long a run of a message's steps holds it without renewing (default 30 s). Each
    /// journaled step renews it (in a batch journaled together on PostgreSQL, once a tenth of
    /// it has passed: until then the step's commit only locks the run's row, which guards it as
    /// well). A run that dies or stalls holds the message until its lease ends; then the next
    /// delivery takes it over, and the stale run can neither journal nor commit. Set it above
    /// the longest step, calls' timeouts included.
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
        W: AsyncFnOnce(&mut Steps<DB>) -> Result<S, E>,
        F: AsyncFnOnce(&mut DB::Connection, S) -> Result<T, E>,
        E: WorkError,
    {
        let of = RunOf::message(handler, id);
        let (token, journal) = match self.claim_alone(pool, handler, id, &of).await? {
            Claimed::Holds(token, journal) => (token, journal),
            Claimed::Held(retry_after) => return Ok(Stepped::InFlight { retry_after }),
            Claimed::Handled => return Ok(Stepped::Duplicate),
        };
        let mut steps = self.steps_of(pool, of, token, journal, None);
        // The work takes the run; the final commit keeps what it needs to guard it.
        let fence = steps.fence();
        let ran = match work(&mut steps).await {
            Ok(ran) => ran,
            Err(err) => {
                give_back(&fence).await;
                return Err(ProcessError::Handler(err));
            }
        };
        let mut tx = DB::begin(pool).await?;
        let output = match finish(&mut tx, ran).await {
            Ok(output) => output,
            Err(err) => {
                tx.rollback().await?;
                give_back(&fence).await;
                return Err(ProcessError::Handler(err));
            }
        };
        // The guard, the inbox's claim and the journal's end go last, just before the commit
        // (on PostgreSQL in one statement): a take-over meanwhile fails the guard, a message
        // handled by other means fails the claim, and nothing of the transaction commits.
        match self.settle_claimed(&mut tx, &fence).await? {
            Settled::Claimed => {
                tx.commit().await.map_err(Error::from_commit)?;
                count_claims(handler, Claim::Fresh, 1);
                Ok(Stepped::Ran(output))
            }
            Settled::TakenOver => {
                tx.rollback().await?;
                Err(fence.taken_over().into())
            }
            Settled::Handled => {
                tx.rollback().await?;
                count_claims(handler, Claim::Duplicate, 1);
                give_back(&fence).await;
                Ok(Stepped::Duplicate)
            }
        }
    }

    /// Claims the run of message `id` on its own. Where the database claims in one statement,
    /// that statement also finds the message handled before; else the inbox is asked first.
    /// Either way a redelivery of a handled message costs a read and no write. A new run reads
    /// its journal then, which asks the inbox again; a run row that was there already is
    /// settled by the lease's protocol first.
    async fn claim_alone(
        &self,
        pool: &Pool<DB>,
        handler: &HandlerName,
        id: &MessageId,
        of: &RunOf,
    ) -> Result<Claimed, Error> {
        let lease_ms = self.step_lease_ms();
        if self.steps.claim_one.is_none() {
            if self.holds(pool, handler, id).await? {
                return Ok(Claimed::Handled);
            }
            let mut conn = pool.acquire().await?;
            return self.claim_in(&mut conn, of, lease_ms).await;
        }
        let token = new_token()? as i64;
        let (owner, id) = of.columns();
        let claim = Plain::reading(
            |sql: &StepsSql| sql.claim_one.as_ref().expect("checked above"),
            (owner, id, token, lease_ms),
        );
        let mut conn = pool.acquire().await?;
        // The first statement on the inbox's tables: one missing says what to run.
        let (claimed, handled): (i64, i64) = DB::fetch_one(&mut conn, &*self.steps, claim)
            .await
            .map_err(|err| self.error(err))?;
        if handled > 0 {
            return Ok(Claimed::Handled);
        }
        if claimed == 0 {
            return self.claim_in(&mut conn, of, lease_ms).await;
        }
        // Empty (the run row is new), but its read asks the inbox again.
        self.journal_of(&mut conn, of, token).await
    }

    /// The final commit's guard, the inbox's claim and the journal's end, on `tx` just before
    /// the commit (on PostgreSQL in one statement): whether the commit may go.
    async fn settle_claimed(
        &self,
        tx: &mut DB::Connection,
        fence: &Steps<DB>,
    ) -> Result<Settled, Error> {
        let (held, claimed) = if self.steps.settle_one.is_none() {
            let mut settle = self.settle_pending(&fence.run, fence.token);
            settle.claim = true;
            let refused = pending::write::<DB>(tx, &self.steps, &self.sql, &[settle]).await?;
            (refused.taken.is_empty(), refused.handled.is_empty())
        } else {
            let (owner, id) = fence.run.columns();
            let settle = Plain::reading(
                |sql: &StepsSql| sql.settle_one.as_ref().expect("checked above"),
                (owner, id, fence.token, i64::from(!self.keep_journals)),
            );
            let (held, claimed): (i64, i64) = DB::fetch_one(tx, &*self.steps, settle).await?;
            (held > 0, claimed > 0)
        };
        Ok(match (held, claimed) {
            (false, _) => Settled::TakenOver,
            (true, false) => Settled::Handled,
            (true, true) => Settled::Claimed,
        })
    }

    /// The lease of a run of a message's steps, in milliseconds.
    fn step_lease_ms(&self) -> i64 {
        i64::try_from(self.step_lease.as_millis()).unwrap_or(i64::MAX)
    }

    /// The steps of run `of`, held under `token`, with `journal` finished so far; one of a
    /// batch's journaled together where `group` says.
    fn steps_of(
        &self,
        pool: &Pool<DB>,
        of: Arc<RunOf>,
        token: i64,
        journal: Vec<JournalRow>,
        group: Option<Arc<Group<DB>>>,
    ) -> Steps<DB> {
        Steps {
            pool: pool.clone(),
            sql: Arc::clone(&self.steps),
            run: of,
            token,
            lease_ms: self.step_lease_ms(),
            retry_for: self.step_retry,
            journal,
            place: 0,
            group,
        }
    }

    /// What becomes of a handled message's run and journal: forgotten, or (with
    /// [`Inbox::keep_journals`]) kept with the run's lease ended, for the purge to take after the
    /// retention.
    async fn settle_journal(
        &self,
        conn: &mut DB::Connection,
        of: &RunOf,
        token: i64,
    ) -> Result<(), Error> {
        if self.keep_journals {
            end_lease::<DB>(conn, &self.steps, of, token).await
        } else {
            forget::<DB>(conn, &self.steps, of).await
        }
    }

    /// What becomes of a handled message's run and journal on a commit that claims it, as
    /// [`Inbox::settle_journal`] does, left pending for that commit.
    pub(super) fn settle_pending(&self, of: &Arc<RunOf>, token: i64) -> Pending {
        Pending {
            run: Arc::clone(of),
            token,
            lease_ms: if self.keep_journals {
                0
            } else {
                self.step_lease_ms()
            },
            step: None,
            forget: !self.keep_journals,
            claim: false,
        }
    }
}
