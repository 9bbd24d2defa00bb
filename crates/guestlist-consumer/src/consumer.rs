//! The loop: fetch, claim, handle, commit, acknowledge.

use std::future::Future;
use std::time::{Duration, Instant};

use guestlist_core::{Backoff, FailureKind, HandlerName, StopSignal, within_grace};
use guestlist_sqlx::{Backend, Inbox, WorkError};
use sqlx::Pool;

use crate::handled::Handled;
use crate::runtime::Core;
use crate::shutdown::Stop;
use crate::{Error, Handler, IdFrom, InSteps, Message, Source, StepHandler};

/// A consumer: a [`Source`] of deliveries, an [`Inbox`] on a pool, and a handler that does its
/// work on the transaction it is given.
///
/// ```no_run
/// # async fn run<S: guestlist_consumer::Source>(source: S, pool: sqlx::PgPool) -> Result<(), Box<dyn std::error::Error>> {
/// use guestlist_consumer::{Consumer, IdFrom};
/// use guestlist_core::HandlerName;
/// use guestlist_sqlx::Inbox;
///
/// let consumer = Consumer::new(
///     source,
///     pool,
///     Inbox::<sqlx::Postgres>::new(),
///     HandlerName::new("warehouse")?,
///     IdFrom::BrokerId,
///     async |tx, message| {
///         sqlx::query("INSERT INTO pick_tasks (event) VALUES ($1)")
///             .bind(message.id.as_str())
///             .execute(&mut *tx)
///             .await
///             .map(drop)
///     },
/// )
/// .batch_size(100);
/// consumer.run(async { let _ = tokio::signal::ctrl_c().await; }).await?;
/// # Ok(()) }
/// ```
pub struct Consumer<S, DB: Backend, H> {
    pub(crate) source: S,
    pub(crate) core: Core<DB, H>,
}

impl<S, DB, F, E> Consumer<S, DB, F>
where
    S: Source,
    DB: Backend,
    F: AsyncFn(&mut DB::Connection, &Message) -> Result<(), E> + Send + Sync + 'static,
    E: WorkError,
{
    /// A consumer of `source` that claims each message for `name` in `inbox` on `pool`, finding
    /// its id by `id_from`, and runs the async closure `handler` for fresh ones.
    pub fn new(
        source: S,
        pool: Pool<DB>,
        inbox: Inbox<DB>,
        name: HandlerName,
        id_from: IdFrom,
        handler: F,
    ) -> Self {
        Self::with_handler(source, pool, inbox, name, id_from, handler)
    }
}

impl<S, DB, H> Consumer<S, DB, H>
where
    S: Source,
    DB: Backend,
    H: Handler<DB>,
{
    /// [`Consumer::new`] with a [`Handler`] of your own type.
    pub fn with_handler(
        source: S,
        pool: Pool<DB>,
        inbox: Inbox<DB>,
        name: HandlerName,
        id_from: IdFrom,
        handler: H,
    ) -> Self {
        Self::build(source, pool, inbox, name, id_from, handler)
    }
}

impl<S, DB, H> Consumer<S, DB, InSteps<H>>
where
    S: Source,
    DB: Backend,
    H: StepHandler<DB>,
{
    /// A consumer whose handler runs named steps ([`StepHandler`]): each fresh message runs on
    /// its own through [`Inbox::process_steps`], so that a redelivery resumes after the last
    /// step it finished. Batches are fetched and acknowledged as usual, but their messages do
    /// not share a transaction. A message whose steps another consumer runs is a "not yet"
    /// (deferred for what that run's lease has left, never counted as poison).
    ///
    /// ```no_run
    /// # use guestlist_consumer::{Message, StepHandler};
    /// # struct Warehouse;
    /// # impl StepHandler<sqlx::Postgres> for Warehouse {
    /// #     type Error = sqlx::Error;
    /// #     type Done = ();
    /// #     async fn steps(&self, _: &mut guestlist_sqlx::Steps<sqlx::Postgres>, _: &Message) -> Result<(), sqlx::Error> { Ok(()) }
    /// #     async fn finish(&self, _: &mut sqlx::PgConnection, _: &Message, _: ()) -> Result<(), sqlx::Error> { Ok(()) }
    /// # }
    /// # async fn run<S: guestlist_consumer::Source>(source: S, pool: sqlx::PgPool) -> Result<(), Box<dyn std::error::Error>> {
    /// use std::time::Duration;
    /// use guestlist_consumer::{Consumer, IdFrom, shutdown_signal};
    /// use guestlist_core::HandlerName;
    /// use guestlist_sqlx::Inbox;
    ///
    /// let inbox = Inbox::<sqlx::Postgres>::new().step_lease(Duration::from_secs(60));
    /// let consumer = Consumer::with_steps(source, pool, inbox,
    ///     HandlerName::new("warehouse")?, IdFrom::BrokerId, Warehouse);
    /// consumer.run(shutdown_signal()).await?;
    /// # Ok(()) }
    /// ```
    pub fn with_steps(
        source: S,
        pool: Pool<DB>,
        inbox: Inbox<DB>,
        name: HandlerName,
        id_from: IdFrom,
        handler: H,
    ) -> Self {
        Self::build(source, pool, inbox, name, id_from, InSteps(handler))
    }

    /// Runs the fresh messages of a batch side by side, their steps journaled together
    /// ([`Inbox::process_steps_batch`]): one commit per step of the batch instead of one per step
    /// of each message, and a batch of slow calls takes about as long as one of them (default:
    /// off, a message at a time). Each message still resumes after its own last finished step,
    /// and a failure of one message's own is its alone. The messages of a batch are then in no
    /// order with each other: leave it off where a stream's order between messages matters.
    pub fn steps_together(mut self, on: bool) -> Self {
        self.core.together = on;
        self
    }
}

impl<S, DB, H> Consumer<S, DB, H>
where
    S: Source,
    DB: Backend,
    H: Handler<DB>,
{
    /// Consumes until `shutdown` completes, then finishes and acknowledges what it has in hand
    /// (the batch being handled, and the one fetched while it committed) and returns what it
    /// did.
    ///
    /// Each batch is whatever the broker has ready, up to [`batch_size`](Self::batch_size): a
    /// fetch never waits for a batch to fill. What is ready of the next batch is fetched while
    /// the current one commits ([`Source::fetch_ready`]), and a committed batch is acknowledged in as few round trips as the broker
    /// allows ([`Delivery::ack_all`](crate::Delivery::ack_all)); one transaction is in flight at a time.
    ///
    /// Before it fetches anything it makes a claim it rolls back and reads the deferrals of an
    /// id no message has: it refuses to start ([`Error::MissingTable`]) when the inbox's
    /// tables are not there (`run` creates nothing: run `guestlist migrate --database URL` or
    /// [`Inbox::migrate`] first), and waits, reporting an outage on [`health`](Self::health),
    /// while the database cannot be reached.
    ///
    /// Stopping takes at most [`shutdown_grace`](Self::shutdown_grace): a batch stuck on a
    /// database or downstream that never answers is dropped there, unacknowledged.
    pub async fn run(self, shutdown: impl Future<Output = ()> + Send) -> Result<Handled, Error> {
        self.check()?;
        let (grace, name) = (self.core.shutdown_grace, self.core.name.clone());
        let mut handled = Handled::default();
        match within_grace(shutdown, grace, |stop| self.consume(stop, &mut handled)).await {
            Some(Ok(())) => {}
            Some(Err(err)) => return Err(err),
            None => tracing::warn!(handler = %name, ?grace, ?handled,
                "the consumer did not finish within its shutdown grace: it stopped where it \
                 stood; what it had not acknowledged comes back from the broker"),
        }
        Ok(handled)
    }

    /// [`run`](Self::run)'s loop, until `shutdown`, then what is in hand finished.
    async fn consume(self, shutdown: StopSignal, handled: &mut Handled) -> Result<(), Error> {
        let Consumer {
            mut source,
            mut core,
        } = self;
        core.ack_wait = source.ack_wait();
        if core.concurrency > 1 {
            source.order_by_key();
        }
        if let Some(limit) = source.max_deliveries() {
            core.max_deliveries = limit.max(1);
        }
        let mut stop = Stop::new(shutdown);
        // Nothing is fetched before the store is known to be there.
        let mut backoff = Backoff::new(core.outage_backoff.0, core.outage_backoff.1);
        loop {
            let probed = tokio::select! {
                biased;
                _ = stop.wait() => return Ok(()),
                probed = core.probe() => probed,
            };
            match probed {
                Ok(()) => {
                    core.health.recovered();
                    break;
                }
                Err(err @ guestlist_sqlx::Error::MissingTable { .. }) => {
                    return Err(Error::MissingTable(err));
                }
                Err(err) if err.kind() == FailureKind::Outage => {
                    core.health.outage(format!("the database, at start: {err}"));
                    tokio::select! {
                        biased;
                        _ = stop.wait() => return Ok(()),
                        _ = tokio::time::sleep(backoff.next_pause()) => {}
                    }
                }
                Err(err) => return Err(Error::Store(err)),
            }
        }
        let mut stopping = false;
        let mut ahead: Vec<S::Delivery> = Vec::new();
        // When the fetch that brought `ahead` began (no later than its batch's handling began).
        let mut ahead_fetched_at = Instant::now();
        loop {
            let fetched_at;
            let deliveries = if !ahead.is_empty() {
                fetched_at = ahead_fetched_at;
                std::mem::take(&mut ahead)
            } else if stopping {
                break;
            } else {
                fetched_at = Instant::now();
                let fetched = tokio::select! {
                    biased;
                    _ = stop.wait() => break,
                    fetched = source.fetch(core.batch_size) => fetched,
                };
                match fetched {
                    Ok(deliveries) => deliveries,
                    Err(err) => {
                        tracing::warn!(handler = %core.name, error = %err, "fetch failed; trying again");
                        tokio::time::sleep(Duration::from_millis(500)).await;
                        continue;
                    }
                }
            };
            if deliveries.is_empty() {
                // Nothing in hand to try: an outage that ended while idle is noticed here.
                if !core.health.is_ready() && core.probe().await.is_ok() {
                    core.health.recovered();
                }
                continue;
            }
            // Once shutdown has come, nothing more is fetched: what is in hand is finished.
            stopping = stopping || stop.came().await;
            let batch_size = core.batch_size;
            let next = async {
                if stopping {
                    Ok(Vec::new())
                } else {
                    source.fetch_ready(batch_size).await
                }
            };
            // Not raced against shutdown: what is in hand is finished and acknowledged (unless
            // the database is down: then what is held goes back unsettled).
            let handling_began = Instant::now();
            match core
                .handle(deliveries, fetched_at, handled, next, &mut stop)
                .await
            {
                Ok(fetched) => (ahead, ahead_fetched_at) = (fetched, handling_began),
                Err(err) => {
                    tracing::warn!(handler = %core.name, error = %err, "fetch failed; trying again");
                }
            }
        }
        tracing::info!(handler = %core.name, ?handled, "consumer stopped");
        Ok(())
    }
}
