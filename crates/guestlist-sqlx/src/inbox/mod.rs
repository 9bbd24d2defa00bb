//! The inbox: claims on the caller's own transaction.

use std::collections::HashSet;
use std::marker::PhantomData;
use std::sync::Arc;
use std::time::Duration;

use guestlist_core::{Claim, HandlerName, MessageId, TableName};
use tracing::Instrument;

use crate::Error;
use crate::backend::inbox_dead::DeadSql;
use crate::backend::steps::{Done, StepsSql};
use crate::backend::{Backend, InboxSql};
use crate::retry::RetryPolicy;
use crate::scaffold::{clone_without_bound, on_one_table};
use crate::steps::{DEFAULT_STEP_LEASE, DEFAULT_STEP_RETRY};

mod ask;
mod dead;
mod dead_groups;
mod dead_retry;
mod deferrals;
mod process;
mod stats;
mod steps;
mod transaction;
mod upkeep;

pub use dead::{DeadCopy, DeadState, IncomingDeadLetter, KEPT_BODY_BYTES};
pub use dead_groups::DeadGroup;
pub use dead_retry::DeadRetry;
pub use deferrals::Deferrals;
pub use process::{BatchProcessed, ProcessError, Processed};
pub use stats::{HandlerRows, InboxStats};
pub use steps::{MidSteps, Stepped};

/// The guest list of a set of message consumers, kept in one table.
///
/// A claim inserts `(handler, message id)` first, `ON CONFLICT DO NOTHING`, on the transaction
/// that holds the handler's own writes. [`Claim::Fresh`]: do the work and commit, and the tick
/// and the work become durable together. [`Claim::Duplicate`]: roll back and acknowledge, the
/// work was done before. A crash anywhere before the commit loses both, and the redelivery finds
/// no row. A concurrent duplicate on another connection waits on the uncommitted row and then
/// sees [`Claim::Duplicate`] (or [`Claim::Fresh`], if the first one rolled back; on MySQL the
/// waiters may instead get a deadlock error then, which [`Error::is_retryable`] reports: run the
/// whole transaction again, as [`Inbox::process`] does).
///
/// Cheap to clone; build one per table and share it. It holds no pool: its calls join the
/// caller's transaction, so each takes the pool or the connection to run on, as `sqlx::query`
/// does (the parts that run on their own, [`crate::SqlKeyStore`], [`crate::Relay`] and
/// [`crate::Purger`], hold theirs).
///
/// ```no_run
/// # async fn run() -> Result<(), guestlist_sqlx::Error> {
/// use guestlist_sqlx::{Claim, HandlerName, Inbox, MessageId};
/// use sqlx::PgPool;
///
/// let pool = PgPool::connect("postgres://localhost/shop").await?;
/// let inbox = Inbox::<sqlx::Postgres>::new();
/// inbox.migrate(&pool).await?;
///
/// let warehouse = HandlerName::new("warehouse")?;
/// let id = MessageId::new("evt_9f3k")?;
/// let mut tx = inbox.begin(&pool).await?;
/// match inbox.claim(&mut *tx, &warehouse, &id).await? {
///     Claim::Fresh => {
///         sqlx::query("UPDATE orders SET status = 'PICKING' WHERE id = 42")
///             .execute(&mut *tx)
///             .await?;
///         tx.commit().await?;
///     }
///     Claim::Duplicate => tx.rollback().await?,
/// }
/// // Acknowledge the message only now.
/// # Ok(()) }
/// ```
pub struct Inbox<DB: Backend> {
    pub(crate) sql: Arc<InboxSql>,
    pub(crate) steps: Arc<StepsSql>,
    pub(crate) dead: Arc<DeadSql>,
    pub(crate) retry: RetryPolicy,
    pub(crate) step_lease: Duration,
    pub(crate) step_retry: Duration,
    pub(crate) keep_journals: bool,
    db: PhantomData<fn() -> DB>,
}

clone_without_bound!(Inbox<DB: Backend> { sql, steps, dead, retry, step_lease, step_retry, keep_journals, db });
on_one_table!(Inbox, "An inbox", "guestlist_inbox");

impl<DB: Backend> Default for Inbox<DB> {
    fn default() -> Self {
        Self::new()
    }
}

impl<DB: Backend> Inbox<DB> {
    /// An inbox in an already validated table. [`Inbox::with_table`] validates a name first:
    ///
    /// ```
    /// # #[cfg(feature = "sqlite")] {
    /// use guestlist_sqlx::Inbox;
    /// let inbox = Inbox::<sqlx::Sqlite>::with_table("orders_inbox")?;
    /// assert_eq!(inbox.table().as_str(), "orders_inbox");
    ///
    /// let err = Inbox::<sqlx::Sqlite>::with_table("inbox'; --").unwrap_err();
    /// assert!(err.to_string().contains("not a plain identifier"));
    /// # }
    /// # Ok::<(), guestlist_sqlx::InvalidValue>(())
    /// ```
    pub fn in_table(table: TableName) -> Self {
        Self {
            sql: Arc::new(InboxSql::new::<DB>(&table)),
            steps: Arc::new(StepsSql::new::<DB>(&table, Done::inbox(&table))),
            dead: Arc::new(DeadSql::new::<DB>(&table)),
            retry: RetryPolicy::default(),
            step_lease: DEFAULT_STEP_LEASE,
            step_retry: DEFAULT_STEP_RETRY,
            keep_journals: false,
            db: PhantomData,
        }
    }

    /// How many times [`Inbox::process`] and [`Inbox::process_batch`] run a transaction that hit
    /// a deadlock, a serialization failure or a busy database, the first run included (default 8).
    pub fn max_attempts(mut self, attempts: u32) -> Self {
        self.retry.attempts = attempts.max(1);
        self
    }

    /// The table that holds this inbox.
    pub fn table(&self) -> &TableName {
        &self.sql.common.table
    }

    /// The DDL that [`Inbox::migrate`] runs, one statement per entry, for users who run their
    /// own migrations. The same text ships as `sql/<backend>.sql` in this crate.
    pub fn ddl(&self) -> &[String] {
        &self.sql.common.ddl
    }

    /// Begins the transaction a claim and its work should share: `BEGIN IMMEDIATE` on SQLite
    /// (the write lock up front, so the claim waits for other writers instead of failing with
    /// `SQLITE_BUSY_SNAPSHOT`), a plain `BEGIN` elsewhere.
    pub async fn begin(
        &self,
        pool: &sqlx::Pool<DB>,
    ) -> Result<sqlx::Transaction<'static, DB>, Error> {
        Ok(DB::begin(pool).await?)
    }

    /// Claims `id` for `handler` on the caller's transaction: one `INSERT`, no `SELECT` first.
    ///
    /// Pass the transaction that holds the handler's writes (`&mut *tx`), begun with
    /// [`Inbox::begin`] (or `pool.begin()`, except on SQLite: there a deferred transaction that
    /// read first cannot always get the write lock, and its claim fails with
    /// [`Error::DeferredTransaction`]); a connection outside a transaction is refused with
    /// [`Error::NotInTransaction`]. [`Inbox::transaction`] begins, commits and retries for you. On [`Claim::Fresh`], do the work and commit; on
    /// [`Claim::Duplicate`], roll back and acknowledge.
    pub async fn claim(
        &self,
        conn: &mut DB::Connection,
        handler: &HandlerName,
        id: &MessageId,
    ) -> Result<Claim, Error> {
        let span = tracing::debug_span!(
            "guestlist.claim",
            backend = DB::BACKEND,
            handler = handler.as_str(),
            message_id = id.as_str(),
            outcome = tracing::field::Empty,
        );
        async {
            require_transaction::<DB>(conn)?;
            let inserted = DB::claim(conn, &self.sql, handler.as_str(), id.as_str())
                .await
                .map_err(|err| self.claim_error(err))?;
            let claim = if inserted {
                Claim::Fresh
            } else {
                Claim::Duplicate
            };
            tracing::Span::current().record("outcome", claim.as_str());
            count_claims(handler, claim, 1);
            Ok(claim)
        }
        .instrument(span)
        .await
    }

    /// Claims a batch of ids for `handler` in one statement on the caller's transaction, and
    /// returns the fresh ones, sorted.
    ///
    /// MySQL has no `RETURNING`, and a multi-row `INSERT` cannot say which rows were new without
    /// `INSERT IGNORE`, which also swallows unrelated errors: there the batch is claimed one
    /// prepared `INSERT` per id, in sorted order, on the same transaction.
    ///
    /// An id repeated within `ids` counts once. Ids are claimed in sorted order, so two
    /// consumers holding overlapping batches lock rows in the same order and cannot deadlock.
    pub async fn claim_batch(
        &self,
        conn: &mut DB::Connection,
        handler: &HandlerName,
        ids: &[MessageId],
    ) -> Result<Vec<MessageId>, Error> {
        let mut sorted: Vec<&MessageId> = ids.iter().collect();
        sorted.sort_unstable();
        sorted.dedup();
        let span = tracing::debug_span!(
            "guestlist.claim_batch",
            backend = DB::BACKEND,
            handler = handler.as_str(),
            batch = sorted.len(),
            fresh = tracing::field::Empty,
        );
        async {
            require_transaction::<DB>(conn)?;
            if sorted.is_empty() {
                return Ok(Vec::new());
            }
            let raw: Vec<&str> = sorted.iter().map(|id| id.as_str()).collect();
            let inserted = DB::claim_batch(conn, &self.sql, handler.as_str(), &raw)
                .await
                .map_err(|err| self.claim_error(err))?;
            let inserted: HashSet<&str> = inserted.iter().map(String::as_str).collect();
            let fresh: Vec<MessageId> = sorted
                .into_iter()
                .filter(|id| inserted.contains(id.as_str()))
                .cloned()
                .collect();
            tracing::Span::current().record("fresh", fresh.len());
            count_claims(handler, Claim::Fresh, fresh.len());
            count_claims(handler, Claim::Duplicate, raw.len() - fresh.len());
            Ok(fresh)
        }
        .instrument(span)
        .await
    }

    /// Turns a database error into [`Error::MissingTable`] where it says the table is absent.
    pub(crate) fn error(&self, err: sqlx::Error) -> Error {
        Error::from_store::<DB>(self.table(), err)
    }

    /// [`Inbox::error`] for a claim's statement, which can also say that its transaction took
    /// the write lock too late ([`Error::DeferredTransaction`]).
    fn claim_error(&self, err: sqlx::Error) -> Error {
        if DB::is_late_write_lock(&err) {
            Error::DeferredTransaction(err)
        } else {
            self.error(err)
        }
    }
}

/// Refuses a connection with no transaction open.
pub(crate) fn require_transaction<DB: Backend>(conn: &DB::Connection) -> Result<(), Error> {
    use sqlx::Connection;
    if conn.is_in_transaction() {
        Ok(())
    } else {
        Err(Error::NotInTransaction)
    }
}

/// Adds `n` to the claim counter of `handler` and `outcome`.
fn count_claims(handler: &HandlerName, outcome: Claim, n: usize) {
    if n > 0 {
        metrics::counter!(
            "guestlist_inbox_claims_total",
            "handler" => handler.to_string(),
            "outcome" => outcome.as_str(),
        )
        .increment(n as u64);
    }
}
