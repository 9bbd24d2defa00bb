//! A consumer's settings: what [`Consumer::new`] starts from and what each builder method
//! changes.

use std::sync::Arc;
use std::time::Duration;

use guestlist_core::{Backoff, HandlerName};
use guestlist_sqlx::{Backend, Health, Inbox};
use sqlx::Pool;

use crate::held_keys::HeldKeys;
use crate::runtime::Core;
use crate::{Consumer, Error, Handler, IdFrom, KeyFrom, Source};

impl<S, DB, H> Consumer<S, DB, H>
where
    S: Source,
    DB: Backend,
    H: Handler<DB>,
{
    pub(crate) fn build(
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
                shutdown_grace: Duration::from_secs(10),
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

    /// How long [`run`](Self::run) may take to stop once its shutdown has come (default 10 s,
    /// under an orchestrator's usual 30 s before SIGKILL): the batch in hand is finished and
    /// acknowledged within it. Past it, as when the database or a downstream holds its
    /// connection open and never answers, the run returns where it stands, like a crash: what
    /// it had not acknowledged comes back from the broker, and the inbox drops what had
    /// committed.
    pub fn shutdown_grace(mut self, grace: Duration) -> Self {
        self.core.shutdown_grace = grace;
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
}
