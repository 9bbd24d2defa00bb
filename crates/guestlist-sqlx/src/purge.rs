//! Deleting rows older than the retention, in bounded batches.

use std::marker::PhantomData;
use std::sync::Arc;
use std::time::Duration;

use guestlist_core::Retention;
use sqlx::Pool;
use sqlx::pool::PoolConnection;

use crate::Error;
use crate::backend::statement::Plain;
use crate::backend::steps::StepsSql;
use crate::backend::{Backend, TableSql};

/// A purge of one guestlist table (an inbox, or idempotency keys), built by
/// [`Inbox::purge`](crate::Inbox::purge) or [`SqlKeyStore::purge`](crate::SqlKeyStore::purge).
///
/// Rows go in batches of [`Purge::batch_size`], each its own short transaction, with a pause
/// between batches: a live claim waits at most for one batch, never for the whole purge. On
/// SQLite, where one writer holds the whole file, the pause lasts at least as long as the batch
/// did, so that writers polling for the lock find it free half the time. On PostgreSQL and
/// MySQL a session lock lets only one purger work on a table at a time; a second one returns
/// [`Purged::Busy`] at once. On PostgreSQL the purge's session commits without waiting for the
/// disk (`synchronous_commit = off`): a batch a crash loses is deleted again by the next purge,
/// and live commits do not queue behind the purge's flushes.
///
/// ```no_run
/// # async fn run(pool: sqlx::PgPool) -> Result<(), guestlist_sqlx::Error> {
/// use guestlist_sqlx::{Inbox, Retention};
/// let inbox = Inbox::<sqlx::Postgres>::new();
/// let purged = inbox.purge(Retention::default()).run(&pool).await?;
/// println!("{purged:?}");
/// # Ok(()) }
/// ```
#[derive(Debug)]
#[must_use = "a purge does nothing until run"]
pub struct Purge<'a, DB: Backend> {
    table: &'a TableSql,
    /// An inbox's steps journal: the runs and journals of messages left mid-steps.
    journals: Option<&'a StepsSql>,
    retention: Retention,
    batch_size: u32,
    pause: Duration,
    db: PhantomData<fn() -> DB>,
}

/// What a purge did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Purged {
    /// This purge ran and deleted this many rows.
    Deleted(u64),
    /// Another purger holds the table's purge lock; nothing was deleted here.
    Busy,
}

/// A table a [`Purge`] or a [`Purger`](crate::Purger) can work on: an [`Inbox`](crate::Inbox) or
/// a [`SqlKeyStore`](crate::SqlKeyStore). Sealed.
pub trait Purgeable<DB: Backend>: sealed::Sealed {
    #[doc(hidden)]
    fn purge_table(&self) -> Arc<TableSql>;
    /// The steps journal purged beside the table (an inbox's, a key store's).
    #[doc(hidden)]
    fn purge_journals(&self) -> Option<Arc<StepsSql>> {
        None
    }
}

pub(crate) mod sealed {
    /// Seals [`super::Purgeable`].
    #[allow(unreachable_pub)]
    pub trait Sealed {}
}

impl<'a, DB: Backend> Purge<'a, DB> {
    /// Rows deleted per batch unless set: small enough that a batch takes milliseconds. 1,000 on
    /// PostgreSQL and MySQL, 5,000 on SQLite. Measured at 10 million rows on PostgreSQL (2
    /// cores, 4 workers claiming): batches of 1,000 deleted 102,000 rows/s while live claims'
    /// p99 went from 2.5 to 5.0 ms, batches of 5,000 deleted 225,000 rows/s and took it to
    /// 7.2 ms; on MariaDB at a million rows, 1,000 deleted 12,241 rows/s and 5,000 only 7,551.
    /// SQLite's batches each wait their turn for the one write lock, so fewer, larger ones go
    /// faster (14,180 rows/s against 4,882).
    pub const DEFAULT_BATCH_SIZE: u32 = DB::PURGE_BATCH_SIZE;
    /// Pause between batches unless set: lets waiting writers in (SQLite has one writer).
    pub const DEFAULT_PAUSE: Duration = Duration::from_millis(5);

    pub(crate) fn new(table: &'a TableSql, retention: Retention) -> Self {
        Self {
            table,
            journals: None,
            retention,
            batch_size: Self::DEFAULT_BATCH_SIZE,
            pause: Self::DEFAULT_PAUSE,
            db: PhantomData,
        }
    }

    /// Purges `journals` too: the runs and journals of messages left mid-steps (dead-lettered,
    /// or given up), once their run was last touched longer ago than the retention.
    pub(crate) fn with_journals(mut self, journals: Option<&'a StepsSql>) -> Self {
        self.journals = journals;
        self
    }

    /// Rows deleted per batch (at least 1).
    pub fn batch_size(mut self, rows: u32) -> Self {
        self.batch_size = rows.max(1);
        self
    }

    /// Pause between batches.
    pub fn pause(mut self, pause: Duration) -> Self {
        self.pause = pause;
        self
    }

    /// Counts the rows the purge would delete now.
    pub async fn count(&self, pool: &Pool<DB>) -> Result<u64, Error> {
        let mut conn = pool.acquire().await?;
        let older_than_secs = self.older_than_secs();
        let count_older = Plain::reading(|sql: &TableSql| &sql.count_older, (older_than_secs,));
        let (count,): (i64,) = DB::fetch_one(&mut conn, self.table, count_older)
            .await
            .map_err(|err| self.error(err))?;
        let mut count = count.max(0) as u64;
        if let Some(journals) = self.journals {
            let stale =
                Plain::reading(|sql: &StepsSql| &sql.count_stale, (older_than_secs * 1000,));
            match DB::fetch_one(&mut conn, journals, stale).await {
                Ok((stale,)) => count += i64::max(stale, 0) as u64,
                Err(err) => skip_missing::<DB>(journals, err)?,
            }
        }
        Ok(count)
    }

    /// Deletes every row older than the retention.
    pub async fn run(self, pool: &Pool<DB>) -> Result<Purged, Error> {
        self.run_with_progress(pool, |_| {}).await
    }

    /// Deletes every row older than the retention, calling `progress` with the running total
    /// after each batch.
    pub async fn run_with_progress(
        self,
        pool: &Pool<DB>,
        mut progress: impl FnMut(u64) + Send,
    ) -> Result<Purged, Error> {
        let lock = self.table.purge_lock();
        let mut conn = pool.acquire().await?;
        // The lock belongs to this session: if the purge is cancelled (a timeout, a shutdown), the
        // session must end rather than go back to the pool still holding it.
        conn.close_on_drop();
        if !DB::try_lock(&mut conn, &lock).await? {
            tracing::debug!(table = %self.table.table, "another purger holds the lock");
            return Ok(Purged::Busy);
        }
        if !DB::PURGE_SESSION.is_empty() {
            sqlx::raw_sql(sqlx::AssertSqlSafe(DB::PURGE_SESSION))
                .execute(DB::executor(&mut conn))
                .await
                .map_err(|err| self.error(err))?;
        }
        let deleted = match self.delete_batches(&mut conn, &mut progress).await {
            Ok(deleted) => {
                self.delete_journals(&mut conn, deleted, &mut progress)
                    .await
            }
            Err(err) => Err(err),
        };
        match deleted {
            Ok(deleted) => {
                DB::unlock(&mut conn, &lock).await?;
                Ok(Purged::Deleted(deleted))
            }
            // Dropping the connection closes its session, which releases the lock.
            Err(err) => Err(err),
        }
    }

    async fn delete_batches(
        &self,
        conn: &mut PoolConnection<DB>,
        progress: &mut (impl FnMut(u64) + Send),
    ) -> Result<u64, Error> {
        let older_than = self.older_than_secs();
        let limit = u64::from(self.batch_size);
        let mut total = 0;
        // Where the next batch resumes, on backends that report it; `None` starts from the oldest.
        let mut after = None;
        let mut swept = false;
        loop {
            let started = std::time::Instant::now();
            let (deleted, newest) = DB::purge_batch(
                conn,
                self.table,
                older_than,
                i64::from(self.batch_size),
                after,
            )
            .await
            .map_err(|err| self.error(err))?;
            total += deleted;
            metrics::counter!("guestlist_purged_total", "table" => self.table.table.to_string())
                .increment(deleted);
            progress(total);
            if deleted < limit {
                if after.is_none() || swept {
                    tracing::info!(table = %self.table.table, deleted = total, "purge done");
                    return Ok(total);
                }
                // Resumed batches reached the cutoff. One more from the oldest row catches any
                // row older than where they resumed (one written with an old time, say).
                (after, swept) = (None, true);
                continue;
            }
            after = newest;
            let pause = if DB::SINGLE_WRITER {
                self.pause.max(started.elapsed())
            } else {
                self.pause
            };
            if !pause.is_zero() {
                tokio::time::sleep(pause).await;
            }
        }
    }

    /// Forgets, in batches of messages, the runs and journals of messages left mid-steps
    /// longer ago than the retention; `total` rows were deleted before.
    async fn delete_journals(
        &self,
        conn: &mut PoolConnection<DB>,
        mut total: u64,
        progress: &mut (impl FnMut(u64) + Send),
    ) -> Result<u64, Error> {
        let Some(journals) = self.journals else {
            return Ok(total);
        };
        let older_than_ms = self.older_than_secs() * 1000;
        loop {
            let batch = Plain::new(
                |sql: &StepsSql| &sql.purge_stale,
                (older_than_ms, i64::from(self.batch_size)),
            );
            let deleted = match DB::run(conn, journals, batch).await {
                Ok(deleted) => deleted,
                Err(err) => {
                    skip_missing::<DB>(journals, err)?;
                    return Ok(total);
                }
            };
            total += deleted;
            metrics::counter!("guestlist_purged_total", "table" => journals.table.to_string())
                .increment(deleted);
            progress(total);
            if deleted == 0 {
                return Ok(total);
            }
            tokio::time::sleep(self.pause).await;
        }
    }

    fn error(&self, err: sqlx::Error) -> Error {
        Error::from_store::<DB>(&self.table.table, err)
    }

    fn older_than_secs(&self) -> i64 {
        // A century is "forever" for a purge, and keeps every backend's date arithmetic in range.
        const CENTURY_SECS: u64 = 100 * 366 * 24 * 3600;
        self.retention.duration().as_secs().min(CENTURY_SECS) as i64
    }
}

/// Nothing to purge where an inbox made before steps has no journal table; any other error is
/// the purge's.
fn skip_missing<DB: Backend>(journals: &StepsSql, err: sqlx::Error) -> Result<(), Error> {
    match Error::from_store::<DB>(&journals.table, err) {
        Error::MissingTable { .. } => {
            tracing::debug!(table = %journals.table, "no steps journal to purge (run migrate to create it)");
            Ok(())
        }
        err => Err(err),
    }
}
