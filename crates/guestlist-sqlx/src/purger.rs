//! A background task that purges on an interval.

use std::time::Duration;

use guestlist_core::Retention;
use sqlx::Pool;
use tokio::sync::oneshot;
use tokio::task::JoinHandle;

use crate::backend::Backend;
use crate::{Inbox, Purged};

/// Purges an inbox on an interval, in the background, for as long as its handle lives.
///
/// Many instances may run one against one PostgreSQL or MySQL database: a session lock lets one
/// purge at a time and the others skip their turn. Errors are logged and the next turn tries
/// again; a purge never stops the service.
///
/// ```no_run
/// # async fn run(pool: sqlx::PgPool) -> Result<(), guestlist_sqlx::Error> {
/// use std::time::Duration;
/// use guestlist_sqlx::{Inbox, Purger, Retention};
///
/// const HOUR: Duration = Duration::from_secs(3600);
/// let retention = Retention::new(7 * 24 * HOUR, 72 * HOUR)?; // refused if shorter than the horizon
/// let purger = Purger::new(pool, Inbox::<sqlx::Postgres>::new(), retention)
///     .every(HOUR)
///     .spawn();
/// // … serve …
/// purger.shutdown().await;
/// # Ok(()) }
/// ```
#[derive(Debug)]
#[must_use = "a purger does nothing until spawned"]
pub struct Purger<DB: Backend> {
    pool: Pool<DB>,
    inbox: Inbox<DB>,
    retention: Retention,
    every: Duration,
    batch_size: u32,
}

impl<DB: Backend> Purger<DB> {
    /// A purger of `inbox` that deletes rows older than `retention`, every hour unless set.
    pub fn new(pool: Pool<DB>, inbox: Inbox<DB>, retention: Retention) -> Self {
        Self {
            pool,
            inbox,
            retention,
            every: Duration::from_secs(3600),
            batch_size: crate::Purge::<DB>::DEFAULT_BATCH_SIZE,
        }
    }

    /// Time between the start of one purge and the next.
    pub fn every(mut self, interval: Duration) -> Self {
        self.every = interval.max(Duration::from_millis(1));
        self
    }

    /// Rows deleted per batch.
    pub fn batch_size(mut self, rows: u32) -> Self {
        self.batch_size = rows;
        self
    }

    /// Starts purging on the current tokio runtime, at once and then every interval.
    pub fn spawn(self) -> PurgerHandle {
        let (stop, mut stopped) = oneshot::channel();
        let task = tokio::spawn(async move {
            let mut ticks = tokio::time::interval(self.every);
            ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
            loop {
                tokio::select! {
                    _ = &mut stopped => return,
                    _ = ticks.tick() => {}
                }
                let purge = self
                    .inbox
                    .purge(self.retention)
                    .batch_size(self.batch_size)
                    .run(&self.pool);
                tokio::select! {
                    _ = &mut stopped => return,
                    result = purge => match result {
                        Ok(Purged::Deleted(rows)) => tracing::debug!(table = %self.inbox.table(), rows, "purged"),
                        Ok(Purged::Busy) => tracing::debug!(table = %self.inbox.table(), "another instance is purging"),
                        Err(err) => tracing::warn!(table = %self.inbox.table(), error = %err, "purge failed; trying again next turn"),
                    },
                }
            }
        });
        PurgerHandle { stop, task }
    }
}

/// The running purger. Dropping it leaves the task running; call [`PurgerHandle::shutdown`].
#[derive(Debug)]
pub struct PurgerHandle {
    stop: oneshot::Sender<()>,
    task: JoinHandle<()>,
}

impl PurgerHandle {
    /// Stops the purger, abandoning a batch in flight (its transaction rolls back), and waits
    /// for the task to end.
    pub async fn shutdown(self) {
        let _ = self.stop.send(());
        let _ = self.task.await;
    }
}
