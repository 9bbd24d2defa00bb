//! Claim, work and commit in one call, with the transaction run again after a deadlock.

use std::fmt;
use std::time::Duration;

use guestlist_core::{Claim, HandlerName, MessageId};
use sqlx::Pool;

use crate::backend::Backend;
use crate::work_error::{WorkError, as_source, is_retryable_link};
use crate::{Error, Inbox};

/// Whether [`Inbox::process`] ran the work.
#[derive(Debug, Clone, PartialEq, Eq)]
#[must_use]
pub enum Processed<T> {
    /// The message was fresh: the work ran and committed with the claim.
    Ran(T),
    /// The message was a duplicate: the work did not run. Acknowledge it.
    Duplicate,
}

impl<T> Processed<T> {
    /// `true` when the work ran.
    pub fn ran(&self) -> bool {
        matches!(self, Processed::Ran(_))
    }
}

/// What [`Inbox::process_batch`] did with a batch.
#[derive(Debug, Clone, PartialEq, Eq)]
#[must_use]
pub struct BatchProcessed<T> {
    /// The ids claimed fresh, sorted; the work ran for exactly these.
    pub fresh: Vec<MessageId>,
    /// The distinct ids that were already handled, sorted.
    pub duplicates: Vec<MessageId>,
    /// What the work returned, or `None` when every id was a duplicate and the work did not run.
    pub output: Option<T>,
}

/// A failure of [`Inbox::process`]: the store's, or the work's own.
///
/// It is an error of its own whatever the work's error type (`anyhow::Error` included), so `?`
/// carries it into `anyhow::Error` or `Box<dyn Error>`.
#[derive(Debug)]
#[non_exhaustive]
pub enum ProcessError<E> {
    /// The claim, the commit or the connection failed. Do not acknowledge: if the commit itself
    /// failed its outcome is unknown, and the redelivery finds out (it is fresh, or a duplicate).
    Store(Error),
    /// The work returned an error; the claim was rolled back with it, so a redelivery runs again.
    Handler(E),
}

impl<E: fmt::Display> fmt::Display for ProcessError<E> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ProcessError::Store(err) => fmt::Display::fmt(err, f),
            // `{:#}` passes on, so that anyhow prints its chain of contexts.
            ProcessError::Handler(err) if f.alternate() => write!(f, "handler failed: {err:#}"),
            ProcessError::Handler(err) => write!(f, "handler failed: {err}"),
        }
    }
}

impl<E: WorkError> std::error::Error for ProcessError<E> {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            ProcessError::Store(err) => err.source(),
            ProcessError::Handler(err) => as_source(err),
        }
    }
}

impl<E> From<Error> for ProcessError<E> {
    fn from(err: Error) -> Self {
        ProcessError::Store(err)
    }
}

impl<DB: Backend> Inbox<DB> {
    /// Claims `id` for `handler` and, if fresh, runs `work` on the same transaction and commits.
    ///
    /// Returns [`Processed::Ran`] with the work's output, or [`Processed::Duplicate`] without
    /// running it. An error from `work` rolls back the claim with the work's writes. A deadlock,
    /// serialization failure or busy database, anywhere in the error's chain of sources (see
    /// [`WorkError`]), runs the whole transaction again (see [`Inbox::max_attempts`]), so `work`
    /// may be called more than once, each time on a fresh transaction; it never commits twice.
    ///
    /// `work` is an async closure that borrows the transaction's connection (`tx`, pass it on as
    /// `&mut *tx`) and may borrow what it captured. Inside `tokio::spawn`, write `async move |tx|`
    /// and move owned values or `Arc`s into it: rustc cannot yet prove `Send` for a spawned
    /// future in which an async closure captured a reference
    /// ([rust-lang/rust#139475](https://github.com/rust-lang/rust/issues/139475)).
    ///
    /// `work` runs inside [`guestlist_carry::scope`] with `handler:id` as its parent, so that
    /// outbound calls derive a stable idempotency key per step ([`guestlist_carry::key_for`]).
    ///
    /// ```no_run
    /// # async fn run(pool: sqlx::PgPool) -> Result<(), Box<dyn std::error::Error>> {
    /// use guestlist_sqlx::{HandlerName, Inbox, MessageId, Processed};
    ///
    /// let inbox = Inbox::<sqlx::Postgres>::new();
    /// let handler = HandlerName::new("warehouse")?;
    /// let id = MessageId::new("evt_9f3k")?;
    /// let order = 42_i64;
    /// let done = inbox
    ///     .process(&pool, &handler, &id, async |tx| {
    ///         sqlx::query("INSERT INTO pick_tasks (order_id) VALUES ($1)")
    ///             .bind(order)
    ///             .execute(&mut *tx)
    ///             .await
    ///     })
    ///     .await?;
    /// assert!(matches!(done, Processed::Ran(_) | Processed::Duplicate));
    /// # Ok(()) }
    /// ```
    pub async fn process<T, E, F>(
        &self,
        pool: &Pool<DB>,
        handler: &HandlerName,
        id: &MessageId,
        mut work: F,
    ) -> Result<Processed<T>, ProcessError<E>>
    where
        F: AsyncFnMut(&mut DB::Connection) -> Result<T, E>,
        E: WorkError,
    {
        let result = with_retries!(
            self,
            handler.as_str(),
            self.process_once(pool, handler, id, &mut work)
        );
        count_processed(handler, result.as_ref().map(Processed::ran));
        result
    }

    /// One attempt of [`Inbox::process`].
    async fn process_once<T, E, F>(
        &self,
        pool: &Pool<DB>,
        handler: &HandlerName,
        id: &MessageId,
        work: &mut F,
    ) -> Result<Processed<T>, ProcessError<E>>
    where
        F: AsyncFnMut(&mut DB::Connection) -> Result<T, E>,
    {
        let mut tx = DB::begin(pool).await?;
        match self.claim(&mut tx, handler, id).await? {
            Claim::Duplicate => {
                tx.rollback().await?;
                Ok(Processed::Duplicate)
            }
            Claim::Fresh => {
                // Outbound calls inside the work derive their keys from this message.
                let output = guestlist_carry::scope_message(handler, id, work(&mut tx))
                    .await
                    .map_err(ProcessError::Handler)?;
                tx.commit().await.map_err(Error::from_commit)?;
                Ok(Processed::Ran(output))
            }
        }
    }

    /// Claims a batch of ids for `handler` in one statement and, for the fresh ones, runs `work`
    /// on the same transaction and commits: one transaction and one fsync for the whole batch.
    ///
    /// `work` receives the transaction and the fresh ids (sorted) and must do the work for each
    /// of them; it does not run when every id is a duplicate. Retries as [`Inbox::process`] does.
    ///
    /// ```no_run
    /// # async fn run(pool: sqlx::PgPool, ids: Vec<guestlist_sqlx::MessageId>) -> Result<(), Box<dyn std::error::Error>> {
    /// use guestlist_sqlx::{HandlerName, Inbox, MessageId};
    ///
    /// let inbox = Inbox::<sqlx::Postgres>::new();
    /// let handler = HandlerName::new("warehouse")?;
    /// let done = inbox
    ///     .process_batch(&pool, &handler, &ids, async |tx, fresh: &[MessageId]| {
    ///         let events: Vec<&str> = fresh.iter().map(MessageId::as_str).collect();
    ///         sqlx::query("INSERT INTO pick_tasks (event) SELECT * FROM unnest($1::text[])")
    ///             .bind(&events)
    ///             .execute(&mut *tx)
    ///             .await
    ///     })
    ///     .await?;
    /// println!("{} fresh, {} duplicates", done.fresh.len(), done.duplicates.len());
    /// # Ok(()) }
    /// ```
    pub async fn process_batch<T, E, F>(
        &self,
        pool: &Pool<DB>,
        handler: &HandlerName,
        ids: &[MessageId],
        mut work: F,
    ) -> Result<BatchProcessed<T>, ProcessError<E>>
    where
        F: AsyncFnMut(&mut DB::Connection, &[MessageId]) -> Result<T, E>,
        E: WorkError,
    {
        let result = with_retries!(
            self,
            handler.as_str(),
            self.process_batch_once(pool, handler, ids, &mut work)
        );
        count_processed(handler, result.as_ref().map(|b| b.output.is_some()));
        result
    }

    /// One attempt of [`Inbox::process_batch`].
    async fn process_batch_once<T, E, F>(
        &self,
        pool: &Pool<DB>,
        handler: &HandlerName,
        ids: &[MessageId],
        work: &mut F,
    ) -> Result<BatchProcessed<T>, ProcessError<E>>
    where
        F: AsyncFnMut(&mut DB::Connection, &[MessageId]) -> Result<T, E>,
    {
        let mut tx = DB::begin(pool).await?;
        let fresh = self.claim_batch(&mut tx, handler, ids).await?;
        let duplicates = duplicates_of(ids, &fresh);
        if fresh.is_empty() {
            tx.rollback().await?;
            return Ok(BatchProcessed {
                fresh,
                duplicates,
                output: None,
            });
        }
        let output = work(&mut tx, &fresh).await.map_err(ProcessError::Handler)?;
        tx.commit().await.map_err(Error::from_commit)?;
        Ok(BatchProcessed {
            fresh,
            duplicates,
            output: Some(output),
        })
    }

    /// Whether a failed attempt is worth running again: a retryable database error anywhere in
    /// the error's chain, with attempts left. `Yes` carries the pause to wait first.
    pub(crate) fn again<T, E: WorkError>(
        &self,
        label: &str,
        result: Result<T, ProcessError<E>>,
        attempt: u32,
    ) -> Again<Result<T, ProcessError<E>>> {
        let (result, retryable) = match result {
            Ok(output) => return Again::No(Ok(output)),
            Err(ProcessError::Store(err)) => {
                let retryable = err.is_retryable();
                (Err(ProcessError::Store(err)), retryable)
            }
            Err(ProcessError::Handler(err)) => {
                let (err, found) = err.find_in_chain(|link| is_retryable_link(link).then_some(()));
                (Err(ProcessError::Handler(err)), found.is_some())
            }
        };
        if !(retryable && attempt + 1 < self.retry.attempts) {
            return Again::No(result);
        }
        tracing::debug!(
            backend = DB::BACKEND,
            handler = label,
            attempt,
            "deadlock or busy database; running the transaction again"
        );
        metrics::counter!("guestlist_inbox_retries_total", "handler" => label.to_owned())
            .increment(1);
        Again::Yes(self.retry.pause(attempt))
    }
}

/// Awaits `$attempt` (one run of a transaction) until it succeeds, fails for good, or
/// [`Inbox::again`] says no more, pausing between runs. A macro, not a function taking a closure:
/// a closure that borrowed the work would make the caller's future lose `Send`.
macro_rules! with_retries {
    ($inbox:expr, $label:expr, $attempt:expr) => {{
        let mut attempt = 0;
        loop {
            let result = $attempt.await;
            match $inbox.again($label, result, attempt) {
                $crate::inbox::process::Again::Yes(pause) => {
                    tokio::time::sleep(pause).await;
                    attempt += 1;
                }
                $crate::inbox::process::Again::No(result) => break result,
            }
        }
    }};
}
pub(crate) use with_retries;

/// What to do after an attempt.
pub(crate) enum Again<R> {
    /// Wait for the pause, then run the transaction again.
    Yes(Duration),
    /// Done: hand this to the caller.
    No(R),
}

/// Counts a finished `process` call: the work ran and committed, it was a duplicate, or it
/// failed (after any retries).
fn count_processed<E>(handler: &HandlerName, outcome: Result<bool, &ProcessError<E>>) {
    let outcome = match outcome {
        Ok(true) => "committed",
        Ok(false) => "duplicate",
        Err(_) => "failed",
    };
    metrics::counter!("guestlist_inbox_processed_total", "handler" => handler.to_string(), "outcome" => outcome)
        .increment(1);
}

/// The distinct ids of `ids` that are not in `fresh`, sorted.
fn duplicates_of(ids: &[MessageId], fresh: &[MessageId]) -> Vec<MessageId> {
    let mut duplicates: Vec<MessageId> = ids
        .iter()
        .filter(|id| fresh.binary_search(id).is_err())
        .cloned()
        .collect();
    duplicates.sort_unstable();
    duplicates.dedup();
    duplicates
}

impl<E> From<sqlx::Error> for ProcessError<E> {
    fn from(err: sqlx::Error) -> Self {
        ProcessError::Store(Error::Database(err))
    }
}
