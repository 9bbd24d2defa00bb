//! Deleting rows older than the retention, in bounded batches.

use std::time::Duration;

use guestlist_core::Retention;
use sqlx::Pool;
use sqlx::pool::PoolConnection;

use crate::backend::Backend;
use crate::{Error, Inbox};

/// A purge of one inbox table, built by [`Inbox::purge`].
///
/// Rows go in batches of [`Purge::batch_size`], each its own short transaction, with a pause
/// between batches: a live claim waits at most for one batch, never for the whole purge. On
/// SQLite, where one writer holds the whole file, the pause lasts at least as long as the batch
/// did, so that writers polling for the lock find it free half the time. On
/// PostgreSQL and MySQL a session lock lets only one purger work on a table at a time; a second
/// one returns [`Purged::Busy`] at once.
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
    inbox: &'a Inbox<DB>,
    retention: Retention,
    batch_size: u32,
    pause: Duration,
}

/// What a purge did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Purged {
    /// This purge ran and deleted this many rows.
    Deleted(u64),
    /// Another purger holds the table's purge lock; nothing was deleted here.
    Busy,
}

impl<DB: Backend> Inbox<DB> {
    /// A purge of the rows older than `retention` (run it with [`Purge::run`]).
    pub fn purge(&self, retention: Retention) -> Purge<'_, DB> {
        Purge {
            inbox: self,
            retention,
            batch_size: Purge::<DB>::DEFAULT_BATCH_SIZE,
            pause: Purge::<DB>::DEFAULT_PAUSE,
        }
    }

    /// The name of the lock purgers of this table take turns with.
    pub(crate) fn purge_lock_name(&self) -> String {
        format!("guestlist_purge_{}", self.table())
    }
}

impl<DB: Backend> Purge<'_, DB> {
    /// Rows deleted per batch unless set: small enough that a batch takes milliseconds.
    pub const DEFAULT_BATCH_SIZE: u32 = 5_000;
    /// Pause between batches unless set: lets waiting writers in (SQLite has one writer).
    pub const DEFAULT_PAUSE: Duration = Duration::from_millis(5);

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
        DB::count_older(&mut conn, &self.inbox.sql, self.older_than_secs())
            .await
            .map_err(|err| self.inbox.error(err))
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
        let lock = self.inbox.purge_lock_name();
        let mut conn = pool.acquire().await?;
        if !DB::try_lock(&mut conn, &lock).await? {
            tracing::debug!(table = %self.inbox.table(), "another purger holds the lock");
            return Ok(Purged::Busy);
        }
        match self.delete_batches(&mut conn, &mut progress).await {
            Ok(deleted) => {
                DB::unlock(&mut conn, &lock).await?;
                Ok(Purged::Deleted(deleted))
            }
            Err(err) => {
                // Closing the session releases its lock whatever state it is in.
                let _ = conn.close().await;
                Err(err)
            }
        }
    }

    async fn delete_batches(
        &self,
        conn: &mut PoolConnection<DB>,
        progress: &mut (impl FnMut(u64) + Send),
    ) -> Result<u64, Error> {
        let older_than = self.older_than_secs();
        let mut total = 0;
        loop {
            let started = std::time::Instant::now();
            let deleted = DB::purge_batch(
                conn,
                &self.inbox.sql,
                older_than,
                i64::from(self.batch_size),
            )
            .await
            .map_err(|err| self.inbox.error(err))?;
            total += deleted;
            metrics::counter!("guestlist_inbox_purged_total", "table" => self.inbox.table().to_string())
                .increment(deleted);
            progress(total);
            if deleted < u64::from(self.batch_size) {
                tracing::info!(table = %self.inbox.table(), deleted = total, "purge done");
                return Ok(total);
            }
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

    fn older_than_secs(&self) -> i64 {
        // A century is "forever" for a purge, and keeps every backend's date arithmetic in range.
        const CENTURY_SECS: u64 = 100 * 366 * 24 * 3600;
        self.retention.duration().as_secs().min(CENTURY_SECS) as i64
    }
}
