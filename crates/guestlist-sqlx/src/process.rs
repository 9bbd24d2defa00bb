//! Claim, work and commit in one call, with the transaction run again after a deadlock.

use futures_core::future::BoxFuture;
use guestlist_core::{Claim, HandlerName, MessageId};
use sqlx::Pool;

use crate::backend::Backend;
use crate::{Error, Inbox};

/// The future a unit of work returns: it borrows the transaction's connection for `'c`.
pub type WorkFuture<'c, T, E> = BoxFuture<'c, Result<T, E>>;

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
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ProcessError<E> {
    /// The claim, the commit or the connection failed. Do not acknowledge: if the commit itself
    /// failed its outcome is unknown, and the redelivery finds out (it is fresh, or a duplicate).
    #[error(transparent)]
    Store(#[from] Error),
    /// The work returned an error; the claim was rolled back with it, so a redelivery runs again.
    #[error("handler failed: {0}")]
    Handler(#[source] E),
}

impl<DB: Backend> Inbox<DB> {
    /// Claims `id` for `handler` and, if fresh, runs `work` on the same transaction and commits.
    ///
    /// Returns [`Processed::Ran`] with the work's output, or [`Processed::Duplicate`] without
    /// running it. An error from `work` rolls back the claim with the work's writes. A deadlock,
    /// serialization failure or busy database runs the whole transaction again (see
    /// [`Inbox::max_attempts`]), so `work` may be called more than once, each time on a fresh
    /// transaction; it never commits twice.
    ///
    /// The future `work` returns may borrow only the transaction: move or clone into it anything
    /// else it needs (ids and names are cheap to clone).
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
    /// let done = inbox
    ///     .process(&pool, &handler, &id, |tx| {
    ///         Box::pin(async move {
    ///             sqlx::query("INSERT INTO pick_tasks (order_id) VALUES (42)")
    ///                 .execute(&mut *tx)
    ///                 .await
    ///         })
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
        F: for<'c> FnMut(&'c mut DB::Connection) -> WorkFuture<'c, T, E>,
        E: 'static,
    {
        let mut attempt = 0;
        loop {
            let result = async {
                let mut tx = DB::begin(pool).await?;
                match self.claim(&mut tx, handler, id).await? {
                    Claim::Duplicate => {
                        tx.rollback().await?;
                        Ok(Processed::Duplicate)
                    }
                    Claim::Fresh => {
                        // Outbound calls inside the work derive their keys from this message.
                        let output =
                            guestlist_carry::scope(format!("{handler}:{id}"), work(&mut tx))
                                .await
                                .map_err(ProcessError::Handler)?;
                        tx.commit().await.map_err(|err| self.error(err))?;
                        Ok(Processed::Ran(output))
                    }
                }
            }
            .await;
            match result {
                Err(err) if self.retry_after(handler, &err, attempt) => {
                    self.retry.pause(attempt).await;
                    attempt += 1;
                }
                other => {
                    count_processed(handler, other.as_ref().map(Processed::ran));
                    return other;
                }
            }
        }
    }

    /// Claims a batch of ids for `handler` in one statement and, for the fresh ones, runs `work`
    /// on the same transaction and commits: one transaction and one fsync for the whole batch.
    ///
    /// `work` receives the fresh ids (sorted) and must do the work for each of them; it does not
    /// run when every id is a duplicate. Retries as [`Inbox::process`] does.
    pub async fn process_batch<T, E, F>(
        &self,
        pool: &Pool<DB>,
        handler: &HandlerName,
        ids: &[MessageId],
        mut work: F,
    ) -> Result<BatchProcessed<T>, ProcessError<E>>
    where
        F: for<'c> FnMut(&'c mut DB::Connection, &'c [MessageId]) -> WorkFuture<'c, T, E>,
        E: 'static,
    {
        let mut attempt = 0;
        loop {
            let result = async {
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
                tx.commit().await.map_err(|err| self.error(err))?;
                Ok(BatchProcessed {
                    fresh,
                    duplicates,
                    output: Some(output),
                })
            }
            .await;
            match result {
                Err(err) if self.retry_after(handler, &err, attempt) => {
                    self.retry.pause(attempt).await;
                    attempt += 1;
                }
                other => {
                    count_processed(handler, other.as_ref().map(|b| b.output.is_some()));
                    return other;
                }
            }
        }
    }

    /// `true` when `err` is worth running the transaction again and attempts remain.
    fn retry_after<E: 'static>(
        &self,
        handler: &HandlerName,
        err: &ProcessError<E>,
        attempt: u32,
    ) -> bool {
        let retryable = match err {
            ProcessError::Store(err) => err.is_retryable(),
            ProcessError::Handler(err) => work_error_is_retryable(err),
        };
        let again = retryable && attempt + 1 < self.retry.attempts;
        if again {
            tracing::debug!(
                backend = DB::BACKEND,
                handler = handler.as_str(),
                attempt,
                "deadlock or busy database; running the transaction again"
            );
            metrics::counter!("guestlist_inbox_retries_total", "handler" => handler.to_string())
                .increment(1);
        }
        again
    }
}

/// `true` when the work's own error is a database error worth a retry: a `sqlx::Error`, a
/// guestlist [`Error`], or a boxed error whose chain holds one.
fn work_error_is_retryable<E: 'static>(err: &E) -> bool {
    use std::any::Any;
    use std::error::Error as StdError;
    let any: &dyn Any = err;
    if let Some(err) = any.downcast_ref::<sqlx::Error>() {
        return crate::backend::is_retryable(err);
    }
    if let Some(err) = any.downcast_ref::<Error>() {
        return err.is_retryable();
    }
    let chain_start: Option<&(dyn StdError + 'static)> =
        if let Some(boxed) = any.downcast_ref::<Box<dyn StdError + Send + Sync>>() {
            Some(boxed.as_ref())
        } else {
            any.downcast_ref::<Box<dyn StdError>>()
                .map(|boxed| boxed.as_ref())
        };
    std::iter::successors(chain_start, |err| (*err).source()).any(|err| {
        err.downcast_ref::<sqlx::Error>()
            .is_some_and(crate::backend::is_retryable)
            || err.downcast_ref::<Error>().is_some_and(Error::is_retryable)
    })
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
