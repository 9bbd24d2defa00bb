//! A background task that purges on an interval.

use std::marker::PhantomData;
use std::sync::Arc;
use std::time::Duration;

use guestlist_core::Retention;
use sqlx::Pool;
use tokio::sync::oneshot;
use tokio::task::JoinHandle;

use crate::backend::steps::StepsSql;
use crate::backend::{Backend, TableSql};
use crate::purge::{Purge, Purgeable};
use crate::{Inbox, Purged};

/// Purges a guestlist table (an [`Inbox`](crate::Inbox) or a
/// [`SqlKeyStore`](crate::SqlKeyStore)) on an interval, in the background, for as long as its
/// handle lives.
///
/// Many instances may run against one PostgreSQL or MySQL database: a session lock lets one
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
/// let purger = Purger::new(pool, &Inbox::<sqlx::Postgres>::new(), retention)
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
    table: Arc<TableSql>,
    journals: Option<Arc<StepsSql>>,
    retention: Retention,
    every: Duration,
    batch_size: u32,
    /// An inbox whose dead letters go too, by their own retention.
    dead: Option<(Inbox<DB>, Duration)>,
    db: PhantomData<fn() -> DB>,
}

impl<DB: Backend> Purger<DB> {
    /// A purger of `table` that deletes rows older than `retention`, every hour unless set.
    pub fn new(pool: Pool<DB>, table: &impl Purgeable<DB>, retention: Retention) -> Self {
        Self {
            pool,
            table: table.purge_table(),
            journals: table.purge_journals(),
            retention,
            every: Duration::from_secs(3600),
            batch_size: Purge::<DB>::DEFAULT_BATCH_SIZE,
            dead: None,
            db: PhantomData,
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

    /// Also deletes `inbox`'s dead letters recorded longer ago than `keep`, at each pass: their
    /// own retention, apart from the guest list's (a dead letter guards no duplicate, so no
    /// redelivery horizon bounds it; one being retried stays). See [`Inbox::purge_dead`].
    pub fn dead_letters(mut self, inbox: &Inbox<DB>, keep: Duration) -> Self {
        self.dead = Some((inbox.clone(), keep));
        self
    }

    /// Starts purging on the current tokio runtime, at once and then every interval.
    pub fn spawn(self) -> PurgerHandle {
        let (stop, mut stopped) = oneshot::channel();
        let task = tokio::spawn(async move {
            let mut ticks = tokio::time::interval(self.every);
            ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
            let table = &self.table.table;
            loop {
                tokio::select! {
                    _ = &mut stopped => return,
                    _ = ticks.tick() => {}
                }
                let purge = Purge::<DB>::new(&self.table, self.retention)
                    .with_journals(self.journals.as_deref())
                    .batch_size(self.batch_size)
                    .run(&self.pool);
                tokio::select! {
                    _ = &mut stopped => return,
                    result = purge => match result {
                        Ok(Purged::Deleted(rows)) => {
                            tracing::debug!(%table, rows, "purged");
                            passed(table.as_str(), self.every);
                        }
                        Ok(Purged::Busy) => tracing::debug!(%table, "another instance is purging"),
                        Err(err) => tracing::warn!(%table, error = %err, "purge failed; trying again next turn"),
                    },
                }
                if let Some((inbox, keep)) = &self.dead {
                    match inbox.purge_dead(&self.pool, *keep).await {
                        Ok(rows) => {
                            tracing::debug!(table = %inbox.table(), rows, "dead letters purged")
                        }
                        Err(err) => {
                            tracing::warn!(table = %inbox.table(), error = %err, "purging dead letters failed; trying again next turn")
                        }
                    }
                }
            }
        });
        PurgerHandle {
            stop: Some(stop),
            task,
        }
    }
}

/// A pass over `table` ended: when (`guestlist_purge_last_success_timestamp_seconds`), beside
/// how often one starts (`guestlist_purge_interval_seconds`), so that an alert can tell a purge
/// that stopped keeping up with the retention.
fn passed(table: &str, every: Duration) {
    let labels = [("table", table.to_owned())];
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap_or_default();
    metrics::gauge!("guestlist_purge_last_success_timestamp_seconds", &labels)
        .set(now.as_secs_f64());
    metrics::gauge!("guestlist_purge_interval_seconds", &labels).set(every.as_secs_f64());
}

/// The running purger. Dropping it stops the purger; [`PurgerHandle::shutdown`] also waits.
#[derive(Debug)]
pub struct PurgerHandle {
    stop: Option<oneshot::Sender<()>>,
    task: JoinHandle<()>,
}

impl PurgerHandle {
    /// Stops the purger and waits for its task to end. A batch in flight is abandoned: its
    /// connection is closed (releasing the purge lock), and the database finishes or rolls back
    /// that one statement on its own.
    pub async fn shutdown(mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        let _ = (&mut self.task).await;
    }
}

impl Drop for PurgerHandle {
    fn drop(&mut self) {
        self.task.abort();
    }
}
