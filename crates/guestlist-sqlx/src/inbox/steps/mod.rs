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

use super::Inbox;
use super::process::ProcessError;
use crate::backend::Backend;
use crate::backend::steps::JournalRow;
use crate::steps::group::Group;
use crate::steps::{Run, RunOf, Steps, claim_run, end_lease, forget, give_back, read_journal};
use crate::{Error, WorkError};

mod batch;
mod claims;
mod mid;

pub use mid::MidSteps;

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
        let lease_ms = self.step_lease_ms();
        // A redelivery of a handled message costs one read, no write.
        if self.holds(pool, handler, id).await? {
            return Ok(Stepped::Duplicate);
        }
        let of = RunOf::message(handler, id);
        let mut conn = pool.acquire().await?;
        let token = match claim_run::<DB>(&mut conn, &self.steps, &of, lease_ms).await? {
            Run::Holds(token) => token,
            Run::Held(retry_after) => return Ok(Stepped::InFlight { retry_after }),
        };
        // The inbox is asked again with the journal, once this run holds the message: a run
        // that committed (and forgot its journal) between the first question and the claim
        // would leave this one to run every step again.
        let Some(journal) = read_journal::<DB>(&mut conn, &self.steps, &of).await? else {
            self.settle_journal(&mut conn, &of, token).await?;
            return Ok(Stepped::Duplicate);
        };
        drop(conn);
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
        fence.guard(&mut tx).await?;
        if self.claim(&mut tx, handler, id).await? == Claim::Duplicate {
            tx.rollback().await?;
            return Ok(Stepped::Duplicate);
        }
        let output = match finish(&mut tx, ran).await {
            Ok(output) => output,
            Err(err) => {
                tx.rollback().await?;
                give_back(&fence).await;
                return Err(ProcessError::Handler(err));
            }
        };
        self.settle_journal(&mut tx, &fence.run, fence.token)
            .await?;
        tx.commit().await.map_err(Error::from_commit)?;
        Ok(Stepped::Ran(output))
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
}
