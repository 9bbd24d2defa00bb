//! The loop: fetch, claim, handle, commit, acknowledge.

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use guestlist_core::{Backoff, FailureKind, HandlerName};
use guestlist_sqlx::{Backend, Health, Inbox, WorkError};
use sqlx::Pool;

use crate::handled::Handled;
use crate::held_keys::HeldKeys;
use crate::runtime::Core;
use crate::shutdown::Stop;
use crate::{Error, Handler, IdFrom, InSteps, KeyFrom, Message, Source, StepHandler};

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
    source: S,
    core: Core<DB, H>,
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
    fn build(
        source: S,
        pool: Pool<DB>,
        inbox: Inbox<DB>,
        name: HandlerName,
        id_from: IdFrom,
        handler: H,
    ) -> Self {
        let health = Health::new("consumer", name.as_str());
        Self {
            source,
            core: Core {
                pool,
                inbox,
                name,
                id_from,
                handler: Arc::new(handler),
                batch_size: 100,
                max_deliveries: 5,
                backoff: (Duration::from_millis(500), Duration::from_secs(60)),
                handler_timeout: Duration::from_secs(300),
                max_deferral: Duration::from_secs(3600),
                keep_alive: true,
                retention: None,
                ack_wait: None,
                health,
                outage_backoff: (Backoff::DEFAULT_FIRST, Backoff::DEFAULT_MAX),
                together: false,
                concurrency: 1,
                key_from: KeyFrom::default(),
                held: HeldKeys::default(),
            },
        }
    }

    /// The most messages claimed and committed together (default 100). A batch is whatever the
    /// broker has ready up to this limit, never waited for: one message when traffic is thin,
    /// the limit under load. A batch is one transaction and one fsync; a failing handler sends
    /// the batch through one by one. With slow handlers, lower it so that a batch finishes well
    /// within the broker's ack wait (keep-alives cover a batch in hand, not one waiting).
    pub fn batch_size(mut self, messages: usize) -> Self {
        self.core.batch_size = messages.max(1);
        self
    }

    /// How many keys' messages are handled at once (default 1: a batch at a time, in the
    /// broker's order). Above 1, a batch is split by key ([`keys`](Self::keys)) into up to this
    /// many lanes, each claimed, handled and committed on a transaction of its own and
    /// acknowledged after its commit, the lanes at once: a key's messages still run one after
    /// another in the broker's order, and the next batch starts once every lane is settled. A
    /// handler that waits on another system (a 10 ms call) then takes about a lane's share of a
    /// batch's time instead of the whole batch's. Give the pool at least this many connections.
    ///
    /// A lane is a transaction of its own: it pays for itself where the handler waits on
    /// another system, not where it only writes to its database (a batch of quick inserts runs
    /// fastest as one transaction: leave such a consumer at 1). On SQLite, whose writers take
    /// turns, lanes run one after another: there a handler in steps (whose calls run outside any
    /// transaction) is the way to wait on several systems at once.
    ///
    /// A message that fails or defers goes back to the broker as before, and the later
    /// messages of its key wait behind it (sent back to come again after it, uncounted) while
    /// every other key flows. On Kafka a record handed back is then kept in memory and handed
    /// out again after its delay, instead of its partition being sought back to it; the
    /// partition's committed offset stays below it until it is done.
    pub fn concurrency(mut self, keys: usize) -> Self {
        self.core.concurrency = keys.max(1);
        self
    }

    /// Where a message's ordering key comes from (default [`KeyFrom::Broker`]: a Kafka record's
    /// key, an SQS FIFO message's group; NATS and RabbitMQ messages then have none, and keep the
    /// broker's order).
    pub fn keys(mut self, from: KeyFrom) -> Self {
        self.core.key_from = from;
        self
    }

    /// Deliveries after which a failing message is dead-lettered (default 5). A broker that
    /// dead-letters by itself sets its own ([`Source::max_deliveries`]: an SQS redrive policy's
    /// `maxReceiveCount`), which wins.
    pub fn max_deliveries(mut self, deliveries: u32) -> Self {
        self.core.max_deliveries = deliveries.max(1);
        self
    }

    /// The delay before a failed message comes back: `first`, doubled per delivery, at most `max`.
    pub fn backoff(mut self, first: Duration, max: Duration) -> Self {
        self.core.backoff = (first, max.max(first));
        self
    }

    /// The longest a handler may run before it is abandoned as failed (default 5 minutes).
    pub fn handler_timeout(mut self, limit: Duration) -> Self {
        self.core.handler_timeout = limit;
        self
    }

    /// How long a message may keep being deferred, from its first deferral, before it is
    /// dead-lettered (default 1 hour: longer than any sane idempotency-key lease downstream).
    ///
    /// A handler defers with a [`Deferral`](guestlist_core::Deferral) (returned as its error, or recorded with
    /// [`guestlist_core::defer`], which `guestlist_carry::CarryKey` does when a downstream
    /// answers 409 in flight, 429, 503 or refuses the connection). A deferred message goes back
    /// for the delay the deferral asks and does not count toward
    /// [`max_deliveries`](Self::max_deliveries); deferrals are counted in the inbox's
    /// `<table>_deferrals`, so that every consumer instance sees them.
    pub fn max_deferral(mut self, limit: Duration) -> Self {
        self.core.max_deferral = limit;
        self
    }

    /// Whether deliveries in hand are kept alive while handlers run (default on). Off, the
    /// broker's ack wait must exceed the handler timeout.
    pub fn keep_alive(mut self, on: bool) -> Self {
        self.core.keep_alive = on;
        self
    }

    /// The inbox's retention, checked at start against the broker's redelivery horizon.
    pub fn retention(mut self, retention: guestlist_core::Retention) -> Self {
        self.core.retention = Some(retention);
        self
    }

    /// The pauses between tries while the database is down: `first` (default 0.2 s), doubling
    /// up to `max` (default 5 s).
    ///
    /// A database that cannot be reached, is out of connections or shutting down, or lacks the
    /// inbox's table is an outage, not a failure of the message: nothing is counted against it
    /// and nothing is handed back. The deliveries in hand are held and kept alive, nothing more
    /// is fetched, [`health`](Self::health) reports the outage, and the held deliveries are
    /// tried again after each pause until the database answers.
    pub fn outage_backoff(mut self, first: Duration, max: Duration) -> Self {
        self.core.outage_backoff = (first, max.max(first));
        self
    }

    /// The consumer's health: whether it works or waits out an outage of its database. Cheap
    /// to clone; take it before [`run`](Self::run) and answer a service's `/readyz` from it.
    /// Each change is logged once, and the gauge `guestlist_outage{hop="consumer",name=<handler>}`
    /// is 1 while the outage lasts.
    ///
    /// ```no_run
    /// # async fn run<S: guestlist_consumer::Source>(source: S, pool: sqlx::PgPool) -> Result<(), Box<dyn std::error::Error>> {
    /// use guestlist_consumer::{Consumer, IdFrom, shutdown_signal};
    /// use guestlist_core::HandlerName;
    /// use guestlist_sqlx::Inbox;
    ///
    /// let consumer = Consumer::new(source, pool, Inbox::<sqlx::Postgres>::new(),
    ///     HandlerName::new("warehouse")?, IdFrom::BrokerId,
    ///     async |_tx, _message| Ok::<(), sqlx::Error>(()));
    /// let health = consumer.health();
    /// // `/readyz`: 200 while `health.is_ready()`, else 503 with `health.cause()`.
    /// # let _ = &health;
    /// consumer.run(shutdown_signal()).await?;
    /// # Ok(()) }
    /// ```
    pub fn health(&self) -> Health {
        self.core.health.clone()
    }

    /// Refuses settings that would redeliver a message the inbox has forgotten, or while its
    /// handler still runs.
    pub fn check(&self) -> Result<(), Error> {
        let core = &self.core;
        if let Some(ack_wait) = self.source.ack_wait()
            && !core.keep_alive
            && ack_wait <= core.handler_timeout
        {
            return Err(Error::AckWaitTooShort {
                ack_wait,
                handler_timeout: core.handler_timeout,
            });
        }
        if let (Some(retention), Some(horizon)) = (core.retention, self.source.redelivery_horizon())
            && retention.duration() < horizon
        {
            return Err(Error::RetentionShorterThanRedelivery {
                retention: retention.duration(),
                horizon,
            });
        }
        Ok(())
    }

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
    pub async fn run(self, shutdown: impl Future<Output = ()> + Send) -> Result<Handled, Error> {
        self.check()?;
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
        let mut handled = Handled::default();
        let mut stop = Stop::new(shutdown);
        // Nothing is fetched before the store is known to be there.
        let mut backoff = Backoff::new(core.outage_backoff.0, core.outage_backoff.1);
        loop {
            let probed = tokio::select! {
                biased;
                _ = stop.wait() => return Ok(handled),
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
                        _ = stop.wait() => return Ok(handled),
                        _ = tokio::time::sleep(backoff.next_pause()) => {}
                    }
                }
                Err(err) => return Err(Error::Store(err)),
            }
        }
        let mut stopping = false;
        let mut ahead: Vec<S::Delivery> = Vec::new();
        loop {
            let deliveries = if !ahead.is_empty() {
                std::mem::take(&mut ahead)
            } else if stopping {
                break;
            } else {
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
            match core.handle(deliveries, &mut handled, next, &mut stop).await {
                Ok(fetched) => ahead = fetched,
                Err(err) => {
                    tracing::warn!(handler = %core.name, error = %err, "fetch failed; trying again");
                }
            }
        }
        tracing::info!(handler = %core.name, ?handled, "consumer stopped");
        Ok(handled)
    }
}
