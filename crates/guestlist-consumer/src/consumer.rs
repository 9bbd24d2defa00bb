//! The loop: fetch, claim, handle, commit, acknowledge.

use std::collections::HashSet;
use std::future::Future;
use std::sync::Arc;
use std::time::{Duration, Instant};

use guestlist_core::{Deferral, HandlerName, MessageId, Retention};
use guestlist_sqlx::{Backend, Inbox, ProcessError, Processed, WorkError};
use sqlx::Pool;

use crate::{Delivery, Handler, IdFrom, Message, Source};

/// A consumer that refuses to start, or whose store failed.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ConsumerError {
    /// The broker's ack wait is shorter than a handler may run, and keep-alives are off.
    #[error(
        "the broker redelivers after {ack_wait:?} without an acknowledgement, but handlers may run \
         {handler_timeout:?}: raise the consumer's ack wait, lower Consumer::handler_timeout, or \
         keep keep-alives on"
    )]
    AckWaitTooShort {
        /// The broker's ack wait.
        ack_wait: Duration,
        /// The consumer's handler timeout.
        handler_timeout: Duration,
    },
    /// The inbox would forget messages the broker may still redeliver.
    #[error(
        "the inbox keeps rows {retention:?}, but the broker may redeliver a message up to {horizon:?} \
         after its first delivery: keep rows longer (Retention::new), or bound the broker's redeliveries"
    )]
    RetentionShorterThanRedelivery {
        /// The inbox's retention.
        retention: Duration,
        /// The broker's redelivery horizon.
        horizon: Duration,
    },
    /// The broker failed.
    #[error("broker error: {0}")]
    Broker(#[source] crate::BrokerError),
}

/// What a run of the consumer did, counted.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Handled {
    /// Deliveries fetched.
    pub delivered: u64,
    /// Messages whose handler ran and committed.
    pub fresh: u64,
    /// Deliveries of messages already handled: acknowledged without running the handler.
    pub duplicates: u64,
    /// Handler runs that failed (the message went back with backoff, or to the dead letters).
    pub failed: u64,
    /// Handler runs that said "not yet" ([`Deferral`]): the message went back for the delay it
    /// asked, without counting as a failure.
    pub deferred: u64,
    /// Messages moved to the dead-letter place.
    pub dead_lettered: u64,
}

/// Why a handler run failed: its own error (its type erased, its chain of sources kept), or it
/// ran out of time.
#[derive(Debug)]
enum Failure {
    Handler(Box<dyn std::error::Error + Send + Sync>),
    TimedOut(Duration),
}

impl Failure {
    /// The deferral the handler returned as its error, or held in the error's chain.
    fn deferral(&self) -> Option<&Deferral> {
        let Failure::Handler(err) = self else {
            return None;
        };
        Deferral::find(err.as_ref())
    }
}

impl std::fmt::Display for Failure {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Failure::Handler(err) => write!(f, "{err}"),
            Failure::TimedOut(limit) => write!(f, "the handler ran longer than {limit:?}"),
        }
    }
}

impl std::error::Error for Failure {
    // The handler's own error is the source, so the inbox sees a deadlock inside it and runs the
    // transaction again.
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            Failure::Handler(err) => Some(&**err),
            Failure::TimedOut(_) => None,
        }
    }
}

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
    pool: Pool<DB>,
    inbox: Inbox<DB>,
    name: HandlerName,
    id_from: IdFrom,
    handler: Arc<H>,
    batch_size: usize,
    max_deliveries: u32,
    backoff: (Duration, Duration),
    handler_timeout: Duration,
    max_deferral: Duration,
    keep_alive: bool,
    retention: Option<Retention>,
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
        Self {
            source,
            pool,
            inbox,
            name,
            id_from,
            handler: Arc::new(handler),
            batch_size: 1,
            max_deliveries: 5,
            backoff: (Duration::from_millis(500), Duration::from_secs(60)),
            handler_timeout: Duration::from_secs(300),
            max_deferral: Duration::from_secs(3600),
            keep_alive: true,
            retention: None,
        }
    }

    /// Messages fetched, claimed and committed together (default 1). A batch is one
    /// transaction and one fsync; a failing handler sends the batch through one by one.
    pub fn batch_size(mut self, messages: usize) -> Self {
        self.batch_size = messages.max(1);
        self
    }

    /// Deliveries after which a failing message is dead-lettered (default 5).
    pub fn max_deliveries(mut self, deliveries: u32) -> Self {
        self.max_deliveries = deliveries.max(1);
        self
    }

    /// The delay before a failed message comes back: `first`, doubled per delivery, at most `max`.
    pub fn backoff(mut self, first: Duration, max: Duration) -> Self {
        self.backoff = (first, max.max(first));
        self
    }

    /// The longest a handler may run before it is abandoned as failed (default 5 minutes).
    pub fn handler_timeout(mut self, limit: Duration) -> Self {
        self.handler_timeout = limit;
        self
    }

    /// How long a message may keep being deferred, from its first deferral, before it is
    /// dead-lettered (default 1 hour: longer than any sane idempotency-key lease downstream).
    ///
    /// A handler defers with a [`Deferral`] (returned as its error, or recorded with
    /// [`guestlist_carry::defer`], which `guestlist_carry::CarryKey` does when a downstream
    /// answers 409 in flight, 429, 503 or refuses the connection). A deferred message goes back
    /// for the delay the deferral asks and does not count toward
    /// [`max_deliveries`](Self::max_deliveries); deferrals are counted in the inbox's
    /// `<table>_deferrals`, so that every consumer instance sees them.
    pub fn max_deferral(mut self, limit: Duration) -> Self {
        self.max_deferral = limit;
        self
    }

    /// Whether deliveries in hand are kept alive while handlers run (default on). Off, the
    /// broker's ack wait must exceed the handler timeout.
    pub fn keep_alive(mut self, on: bool) -> Self {
        self.keep_alive = on;
        self
    }

    /// The inbox's retention, checked at start against the broker's redelivery horizon.
    pub fn retention(mut self, retention: Retention) -> Self {
        self.retention = Some(retention);
        self
    }

    /// Refuses settings that would redeliver a message the inbox has forgotten, or while its
    /// handler still runs.
    pub fn check(&self) -> Result<(), ConsumerError> {
        if let Some(ack_wait) = self.source.ack_wait()
            && !self.keep_alive
            && ack_wait <= self.handler_timeout
        {
            return Err(ConsumerError::AckWaitTooShort {
                ack_wait,
                handler_timeout: self.handler_timeout,
            });
        }
        if let (Some(retention), Some(horizon)) = (self.retention, self.source.redelivery_horizon())
            && retention.duration() < horizon
        {
            return Err(ConsumerError::RetentionShorterThanRedelivery {
                retention: retention.duration(),
                horizon,
            });
        }
        Ok(())
    }

    /// Consumes until `shutdown` completes, then finishes and acknowledges the batch in hand
    /// and returns what it did.
    pub async fn run(
        mut self,
        shutdown: impl Future<Output = ()> + Send,
    ) -> Result<Handled, ConsumerError> {
        self.check()?;
        let mut handled = Handled::default();
        tokio::pin!(shutdown);
        loop {
            let fetched = tokio::select! {
                biased;
                _ = &mut shutdown => break,
                fetched = self.source.fetch(self.batch_size) => fetched,
            };
            let deliveries = match fetched {
                Ok(deliveries) => deliveries,
                Err(err) => {
                    tracing::warn!(handler = %self.name, error = %err, "fetch failed; trying again");
                    tokio::time::sleep(Duration::from_millis(500)).await;
                    continue;
                }
            };
            if !deliveries.is_empty() {
                // Not raced against shutdown: what is in hand is finished and acknowledged.
                self.handle(deliveries, &mut handled).await;
            }
        }
        tracing::info!(handler = %self.name, ?handled, "consumer stopped");
        Ok(handled)
    }

    /// Handles one fetched batch to its end.
    async fn handle(&self, deliveries: Vec<S::Delivery>, handled: &mut Handled) {
        let name = self.name.as_str().to_owned();
        self.count("delivered", deliveries.len() as u64);
        handled.delivered += deliveries.len() as u64;
        metrics::histogram!("guestlist_consumer_batch_size", "handler" => name)
            .record(deliveries.len() as f64);
        let mut ready = Vec::with_capacity(deliveries.len());
        for delivery in deliveries {
            let id = match self.id_from.id_of(&delivery) {
                Ok(id) => id,
                Err(why) => {
                    tracing::error!(handler = %self.name, reason = %why, "dead-lettering a message");
                    self.dead_letter_only(&delivery, &format!("no message id: {why}"), handled)
                        .await;
                    continue;
                }
            };
            if delivery.delivery_count() > self.max_deliveries {
                let failed = self.failed_deliveries(&delivery, &id).await;
                if failed > self.max_deliveries {
                    let why = format!(
                        "delivered {} times without being handled, deferrals aside (the consumer may have died on it each time)",
                        failed - 1
                    );
                    self.dead_letter(&delivery, &id, &why, handled).await;
                    continue;
                }
            }
            let message = Arc::new(Message {
                id,
                payload: delivery.payload().to_vec(),
                delivery_count: delivery.delivery_count(),
            });
            ready.push((Arc::new(delivery), message));
        }
        if ready.is_empty() {
            return;
        }
        let keep_alive = self.keep_alive_while(&ready);
        let batched = if ready.len() > 1 {
            self.in_one_transaction(&ready).await
        } else {
            Err(())
        };
        match batched {
            Ok(fresh) => {
                for (delivery, message) in &ready {
                    if fresh.contains(&message.id) {
                        handled.fresh += 1;
                        self.count("fresh", 1);
                    } else {
                        handled.duplicates += 1;
                        self.count("duplicate", 1);
                    }
                    self.ack(delivery.as_ref()).await;
                    self.forget_deferrals(delivery.as_ref(), &message.id).await;
                }
            }
            Err(()) => {
                for (delivery, message) in &ready {
                    self.one_by_one(delivery.as_ref(), message, handled).await;
                }
            }
        }
        if let Some(keep_alive) = keep_alive {
            keep_alive.abort();
        }
    }

    /// Claims the whole batch and runs the handler for its fresh messages on one transaction.
    /// Any failure rolls it all back (`Err`), and the batch goes through one by one.
    async fn in_one_transaction(
        &self,
        ready: &[(Arc<S::Delivery>, Arc<Message>)],
    ) -> Result<HashSet<MessageId>, ()> {
        let attempt = async {
            let mut tx = self
                .inbox
                .begin(&self.pool)
                .await
                .map_err(|e| e.to_string())?;
            let ids: Vec<MessageId> = ready.iter().map(|(_, m)| m.id.clone()).collect();
            let fresh: HashSet<MessageId> = self
                .inbox
                .claim_batch(&mut tx, &self.name, &ids)
                .await
                .map_err(|e| e.to_string())?
                .into_iter()
                .collect();
            let mut ran = HashSet::new();
            for (_, message) in ready {
                // An id twice in one batch runs once.
                if fresh.contains(&message.id) && ran.insert(message.id.clone()) {
                    self.run_handler(&mut tx, message)
                        .await
                        .map_err(|e| e.to_string())?;
                }
            }
            tx.commit().await.map_err(|e| e.to_string())?;
            Ok::<_, String>(fresh)
        };
        attempt.await.map_err(|why| {
            tracing::info!(handler = %self.name, error = %why, "batch rolled back; handling its messages one by one");
        })
    }

    /// One message on its own transaction (with the inbox's retries), then its acknowledgement.
    async fn one_by_one(
        &self,
        delivery: &S::Delivery,
        message: &Arc<Message>,
        handled: &mut Handled,
    ) {
        let (handler, timeout, message_for_work) =
            (self.handler.clone(), self.handler_timeout, message.clone());
        let (outcome, deferred) = guestlist_carry::watch_deferral(self.inbox.process(
            &self.pool,
            &self.name,
            &message.id,
            async move |tx| timed(timeout, handler.handle(tx, &message_for_work)).await,
        ))
        .await;
        match outcome {
            Ok(Processed::Ran(())) => {
                handled.fresh += 1;
                self.count("fresh", 1);
                self.ack(delivery).await;
                self.forget_deferrals(delivery, &message.id).await;
            }
            Ok(Processed::Duplicate) => {
                handled.duplicates += 1;
                self.count("duplicate", 1);
                self.ack(delivery).await;
                self.forget_deferrals(delivery, &message.id).await;
            }
            Err(ProcessError::Handler(failure)) => {
                if let Some(deferral) = deferred.or_else(|| failure.deferral().cloned()) {
                    self.defer(delivery, message, &deferral, handled).await;
                    return;
                }
                handled.failed += 1;
                self.count("failed", 1);
                let failed = self.failed_deliveries(delivery, &message.id).await;
                if failed >= self.max_deliveries {
                    let why = format!(
                        "failed on delivery {failed} of {} (deferrals aside): {failure}",
                        self.max_deliveries
                    );
                    self.dead_letter(delivery, &message.id, &why, handled).await;
                } else {
                    let delay = self.delay(failed);
                    tracing::warn!(handler = %self.name, id = %message.id, error = %failure, ?delay, "handler failed; the message comes back later");
                    if let Err(err) = delivery.nak(delay).await {
                        tracing::warn!(handler = %self.name, error = %err, "cannot hand the message back; the broker redelivers it after its ack wait");
                    }
                }
            }
            Err(err) => {
                // The store failed, not the message: back it goes, without counting against it.
                tracing::warn!(handler = %self.name, id = %message.id, error = %err, "store failed; the message comes back later");
                let _ = delivery.nak(self.backoff.0).await;
            }
        }
    }

    /// A handler said "not yet": the message goes back for the delay it asked, without counting
    /// as a failure, unless it has been deferred for longer than `max_deferral`.
    async fn defer(
        &self,
        delivery: &S::Delivery,
        message: &Message,
        deferral: &Deferral,
        handled: &mut Handled,
    ) {
        let deferrals = match self.inbox.defer(&self.pool, &self.name, &message.id).await {
            Ok(deferrals) => deferrals,
            Err(err) => {
                // Uncounted, it must not pass for a deferral: back it goes as after a store failure.
                tracing::warn!(handler = %self.name, id = %message.id, error = %err, "cannot count a deferral; the message comes back later");
                let _ = delivery.nak(self.backoff.0).await;
                return;
            }
        };
        let age = deferrals.age();
        if age >= self.max_deferral {
            let why = format!(
                "deferred {} times over {age:?}, past the consumer's max_deferral of {:?}; the last: {deferral}",
                deferrals.count, self.max_deferral
            );
            self.dead_letter(delivery, &message.id, &why, handled).await;
            return;
        }
        handled.deferred += 1;
        self.count("deferred", 1);
        let delay = deferral
            .after()
            .max(Duration::from_millis(100))
            .min(self.max_deferral - age);
        tracing::info!(handler = %self.name, id = %message.id, reason = deferral.reason(), ?delay, deferrals = deferrals.count, "not yet; the message comes back later");
        if let Err(err) = delivery.nak(delay).await {
            tracing::warn!(handler = %self.name, error = %err, "cannot hand the message back; the broker redelivers it after its ack wait");
        }
    }

    /// The deliveries of `delivery`'s message so far (this one included) that were not
    /// deferrals: failures, and runs the consumer died in.
    async fn failed_deliveries(&self, delivery: &S::Delivery, id: &MessageId) -> u32 {
        let count = delivery.delivery_count();
        if count <= 1 {
            return count;
        }
        match self.inbox.deferrals(&self.pool, &self.name, id).await {
            Ok(deferrals) => count
                .saturating_sub(deferrals.map_or(0, |d| d.count))
                .max(1),
            Err(err) => {
                tracing::warn!(handler = %self.name, id = %id, error = %err, "cannot read the message's deferrals; counting every delivery as a failure");
                count
            }
        }
    }

    /// Forgets a handled message's deferrals, if it may have any.
    async fn forget_deferrals(&self, delivery: &S::Delivery, id: &MessageId) {
        if delivery.delivery_count() <= 1 {
            return; // a first delivery was never deferred
        }
        if let Err(err) = self
            .inbox
            .forget_deferrals(&self.pool, &self.name, id)
            .await
        {
            tracing::warn!(handler = %self.name, id = %id, error = %err, "cannot forget the message's deferrals; its row stays in the deferrals table");
        }
    }

    /// The handler, on `tx`, within the handler timeout.
    async fn run_handler(&self, tx: &mut DB::Connection, message: &Message) -> Result<(), Failure> {
        timed(self.handler_timeout, self.handler.handle(tx, message)).await
    }

    fn delay(&self, delivery_count: u32) -> Duration {
        let (first, max) = self.backoff;
        first
            .saturating_mul(2u32.saturating_pow(delivery_count.saturating_sub(1).min(16)))
            .min(max)
    }

    async fn ack(&self, delivery: &S::Delivery) {
        if let Err(err) = delivery.ack().await {
            // Committed already: the redelivery will be a duplicate, acknowledged then.
            tracing::warn!(handler = %self.name, error = %err, "acknowledgement failed; the redelivery will be a duplicate");
        }
    }

    /// Dead-letters the message `id` and forgets its deferrals.
    async fn dead_letter(
        &self,
        delivery: &S::Delivery,
        id: &MessageId,
        why: &str,
        handled: &mut Handled,
    ) {
        tracing::error!(handler = %self.name, id = %id, reason = why, "dead-lettering a message");
        self.dead_letter_only(delivery, why, handled).await;
        self.forget_deferrals(delivery, id).await;
    }

    /// Moves a delivery to the dead-letter place.
    async fn dead_letter_only(&self, delivery: &S::Delivery, why: &str, handled: &mut Handled) {
        handled.dead_lettered += 1;
        self.count("dead_lettered", 1);
        if let Err(err) = delivery.dead_letter(why).await {
            tracing::error!(handler = %self.name, error = %err, "cannot dead-letter the message; the broker redelivers it");
        }
    }

    /// Keeps `ready`'s deliveries alive while they are worked on, where the broker needs it.
    fn keep_alive_while(
        &self,
        ready: &[(Arc<S::Delivery>, Arc<Message>)],
    ) -> Option<tokio::task::JoinHandle<()>> {
        let ack_wait = self.source.ack_wait()?;
        if !self.keep_alive {
            return None;
        }
        let deliveries: Vec<Arc<S::Delivery>> = ready.iter().map(|(d, _)| d.clone()).collect();
        let every = (ack_wait / 3).max(Duration::from_millis(100));
        Some(tokio::spawn(async move {
            let mut ticks = tokio::time::interval_at(tokio::time::Instant::now() + every, every);
            loop {
                ticks.tick().await;
                for delivery in &deliveries {
                    let _ = delivery.keep_alive().await;
                }
            }
        }))
    }

    fn count(&self, outcome: &'static str, n: u64) {
        metrics::counter!("guestlist_consumer_messages_total", "handler" => self.name.as_str().to_owned(), "outcome" => outcome)
            .increment(n);
    }
}

/// Runs `work` within `limit`, timing it for the handler-latency histogram.
async fn timed<E: WorkError>(
    limit: Duration,
    work: impl Future<Output = Result<(), E>>,
) -> Result<(), Failure> {
    let started = Instant::now();
    let result = match tokio::time::timeout(limit, work).await {
        Ok(result) => result.map_err(|err| Failure::Handler(err.into_boxed())),
        Err(_) => Err(Failure::TimedOut(limit)),
    };
    metrics::histogram!("guestlist_consumer_handler_seconds")
        .record(started.elapsed().as_secs_f64());
    result
}
