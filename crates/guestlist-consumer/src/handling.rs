//! One batch, from its deliveries to their acknowledgements: claim, handle, commit, acknowledge;
//! one by one when the batch as a whole fails.

use std::collections::HashSet;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::time::{Duration, Instant};

use guestlist_core::{Backoff, Deferral, FailureKind, HandlerName, MessageId, Retention};
use guestlist_sqlx::{Backend, Health, Inbox, ProcessError, Processed, WorkError, failure_kind};
use sqlx::Pool;

use crate::consumer::Handled;
use crate::failure::Failure;
use crate::shutdown::Stop;
use crate::{BoxError, Delivery, Handler, IdFrom, Message};

/// What a consumer needs besides its source: the store, the handler and the settings.
pub(crate) struct Core<DB: Backend, H> {
    pub(crate) pool: Pool<DB>,
    pub(crate) inbox: Inbox<DB>,
    pub(crate) name: HandlerName,
    pub(crate) id_from: IdFrom,
    pub(crate) handler: Arc<H>,
    pub(crate) batch_size: usize,
    pub(crate) max_deliveries: u32,
    pub(crate) backoff: (Duration, Duration),
    pub(crate) handler_timeout: Duration,
    pub(crate) max_deferral: Duration,
    pub(crate) keep_alive: bool,
    pub(crate) retention: Option<Retention>,
    /// The source's ack wait, read when the consumer starts.
    pub(crate) ack_wait: Option<Duration>,
    /// Working, or waiting out an outage of the database.
    pub(crate) health: Health,
    /// The pauses between tries while the database is down: first, and longest.
    pub(crate) outage_backoff: (Duration, Duration),
}

/// The database is down (unreachable, out of connections, shutting down, its table missing):
/// what the wait is for. Nothing is counted against a message for it; the deliveries not yet
/// settled are held, kept alive, and tried again.
#[derive(Debug)]
pub(crate) struct Outage(String);

impl Outage {
    /// The outage `err` is, if it is one; `what` says where it was met.
    fn of(what: &str, err: &(dyn std::error::Error + 'static)) -> Option<Self> {
        (failure_kind(err) == FailureKind::Outage).then(|| Outage(format!("{what}: {err}")))
    }
}

/// The deliveries an outage left unsettled, to hold and try again.
type Held<D> = (Outage, Vec<Arc<D>>);

/// The next batch's fetch, run while a batch commits: not yet awaited, or done.
enum Next<F: Future> {
    Waiting(Pin<Box<F>>),
    Fetched(F::Output),
}

impl<F: Future> Next<F> {
    async fn output(self) -> F::Output {
        match self {
            Next::Waiting(fetch) => fetch.await,
            Next::Fetched(output) => output,
        }
    }
}

/// A handler run that failed inside a batch, carried to its message when the batch goes one by
/// one: the message is settled with this run's outcome (its deferral, or its failure) instead of
/// running again at once.
struct Carried {
    at: usize,
    failure: Failure,
    deferred: Option<Deferral>,
}

/// How a batch on one transaction ended.
enum Batched {
    /// Committed: the fresh ids.
    Committed(HashSet<MessageId>),
    /// The commit failed (its outcome unknown).
    CommitFailed,
    /// Rolled back before the commit, with the handler run that failed, where one did.
    RolledBack(Option<Carried>),
}

/// Why a batch's transaction stopped before its commit.
enum Stopped {
    Store(guestlist_sqlx::Error),
    Handler(Carried),
}

impl<DB: Backend, H: Handler<DB>> Core<DB, H> {
    /// Handles one fetched batch to its end, running `next` (the next batch's fetch) while the
    /// batch commits, and returns what it fetched.
    ///
    /// While the database is down nothing is counted against a message and nothing is handed
    /// back (a hand-back raises the broker's delivery count): the deliveries still unsettled are
    /// held and kept alive, the outage is reported on [`Health`], and they are tried again after
    /// a doubling pause until the database answers. Nothing more is fetched meanwhile. Asked to
    /// `stop` then, it lets what it holds go back to the broker unsettled, and returns.
    pub(crate) async fn handle<D: Delivery, F, S>(
        &self,
        deliveries: Vec<D>,
        handled: &mut Handled,
        next: F,
        stop: &mut Stop<S>,
    ) -> F::Output
    where
        F: Future<Output = Result<Vec<D>, BoxError>>,
        S: Future<Output = ()>,
    {
        let mut held = self.take_in(deliveries, handled);
        let mut next = Next::Waiting(Box::pin(next));
        let mut backoff = Backoff::new(self.outage_backoff.0, self.outage_backoff.1);
        let mut keep_alive = self.keep_alive_while(&held);
        while !held.is_empty() {
            let (outage, unsettled) = match self.attempt(&held, handled, &mut next).await {
                Ok(answered) => {
                    // Settled after an outage: the database answered again.
                    if answered || backoff.tries() > 0 {
                        self.health.recovered();
                    }
                    break;
                }
                Err(held) => held,
            };
            held = unsettled;
            // What the next fetch brought while the batch committed is in hand too.
            if let Next::Fetched(Ok(fetched)) = &mut next {
                held.extend(self.take_in(std::mem::take(fetched), handled));
            }
            // One taken back meanwhile (its partition moved) comes again: let it go.
            held.retain(|delivery| !delivery.withdrawn());
            if held.is_empty() {
                break;
            }
            stop_keep_alive(keep_alive);
            keep_alive = self.keep_alive_while(&held);
            self.health.outage(&outage.0);
            let pause = backoff.next_pause();
            tracing::debug!(handler = %self.name, held = held.len(), ?pause, cause = %outage.0, "the database is down; holding the deliveries in hand");
            tokio::select! {
                _ = tokio::time::sleep(pause) => {}
                _ = stop.wait() => {
                    tracing::warn!(handler = %self.name, held = held.len(), cause = %outage.0,
                        "asked to stop while the database is down: the deliveries held go back to the broker unsettled");
                    break;
                }
            }
        }
        stop_keep_alive(keep_alive);
        next.output().await
    }

    /// Counts fetched deliveries in, leaving out those the source took back before they were
    /// handled (Kafka: their partition moved, or an earlier record of it was handed back): they
    /// come again and are counted then.
    fn take_in<D: Delivery>(&self, deliveries: Vec<D>, handled: &mut Handled) -> Vec<Arc<D>> {
        let deliveries: Vec<Arc<D>> = deliveries
            .into_iter()
            .filter(|d| !d.withdrawn())
            .map(Arc::new)
            .collect();
        if deliveries.is_empty() {
            return deliveries;
        }
        self.count("delivered", deliveries.len() as u64);
        handled.delivered += deliveries.len() as u64;
        metrics::histogram!("guestlist_consumer_batch_size", "handler" => self.name.as_str().to_owned())
            .record(deliveries.len() as f64);
        deliveries
    }

    /// One try at the deliveries in hand: `Ok` once each is settled (with whether the database
    /// answered), or the outage met and the deliveries it left unsettled.
    async fn attempt<D: Delivery, F: Future>(
        &self,
        held: &[Arc<D>],
        handled: &mut Handled,
        next: &mut Next<F>,
    ) -> Result<bool, Held<D>> {
        let mut ready: Vec<(Arc<D>, Arc<Message>)> = Vec::with_capacity(held.len());
        for (at, delivery) in held.iter().enumerate() {
            match self.admit(delivery, handled).await {
                Ok(Some(message)) => ready.push((Arc::clone(delivery), message)),
                Ok(None) => {}
                Err(outage) => {
                    let mut unsettled: Vec<Arc<D>> = ready.into_iter().map(|(d, _)| d).collect();
                    unsettled.extend(held[at..].iter().cloned());
                    return Err((outage, unsettled));
                }
            }
        }
        if ready.is_empty() {
            return Ok(false);
        }
        // One message goes on its own (with the inbox's retries); several, in one transaction.
        let carried = if ready.len() > 1 {
            match self.in_one_transaction(&ready, next).await {
                Batched::Committed(fresh) => {
                    self.settle_committed(&ready, &fresh, handled).await;
                    return Ok(true);
                }
                // Its outcome unknown: one by one, each finds out (fresh, or a duplicate).
                Batched::CommitFailed => None,
                Batched::RolledBack(carried) => carried,
            }
        } else {
            None
        };
        self.all_one_by_one(&ready, carried, handled).await?;
        Ok(true)
    }

    /// The message of `delivery`, to be handled; `None` when it was settled here instead: no
    /// id (dead-lettered), or past the delivery limit (a duplicate acknowledged, or poison
    /// dead-lettered).
    async fn admit<D: Delivery>(
        &self,
        delivery: &Arc<D>,
        handled: &mut Handled,
    ) -> Result<Option<Arc<Message>>, Outage> {
        let id = match self.id_from.id_of(delivery.as_ref()) {
            Ok(id) => id,
            Err(why) => {
                tracing::error!(handler = %self.name, reason = %why, "dead-lettering a message");
                self.dead_letter_only(delivery.as_ref(), &format!("no message id: {why}"), handled)
                    .await;
                return Ok(None);
            }
        };
        if delivery.delivery_count() > self.max_deliveries {
            let failed = self.failed_deliveries(delivery.as_ref(), &id).await?;
            if failed > self.max_deliveries {
                // A copy of a message already handled (its deferrals forgotten then) is a
                // duplicate however often it was delivered, never poison.
                if self.already_handled(&id).await? {
                    handled.duplicates += 1;
                    self.count("duplicate", 1);
                    self.ack(delivery.as_ref()).await;
                    return Ok(None);
                }
                let why = format!(
                    "delivered {} times without being handled, deferrals aside (the consumer may have died on it each time)",
                    failed - 1
                );
                self.dead_letter(delivery.as_ref(), &id, &why, handled)
                    .await;
                return Ok(None);
            }
        }
        Ok(Some(Arc::new(Message::of(id, delivery))))
    }

    /// A committed batch: counted, acknowledged, its deferrals forgotten.
    async fn settle_committed<D: Delivery>(
        &self,
        ready: &[(Arc<D>, Arc<Message>)],
        fresh: &HashSet<MessageId>,
        handled: &mut Handled,
    ) {
        // An id twice in one batch ran once: its other copies are duplicates.
        let fresh_count = fresh.len() as u64;
        let duplicates = ready.len() as u64 - fresh_count;
        handled.fresh += fresh_count;
        handled.duplicates += duplicates;
        self.count("fresh", fresh_count);
        self.count("duplicate", duplicates);
        let deliveries: Vec<&D> = ready
            .iter()
            .map(|(delivery, _)| delivery.as_ref())
            .collect();
        if let Err(err) = D::ack_all(&deliveries).await {
            // Committed already: a redelivery will be a duplicate, acknowledged then.
            tracing::warn!(handler = %self.name, error = %err, "acknowledgements failed; the redeliveries will be duplicates");
        }
        for (delivery, message) in ready {
            self.forget_deferrals(delivery.as_ref(), &message.id).await;
        }
    }

    /// Each message of `ready` on its own transaction, then its acknowledgement; the one that
    /// failed inside the batch (`carried`) is settled with that run's outcome instead.
    async fn all_one_by_one<D: Delivery>(
        &self,
        ready: &[(Arc<D>, Arc<Message>)],
        mut carried: Option<Carried>,
        handled: &mut Handled,
    ) -> Result<(), Held<D>> {
        for (at, (delivery, message)) in ready.iter().enumerate() {
            // A message handed back withdraws the later ones of its partition (Kafka) or FIFO
            // group (SQS): they come again after it.
            if delivery.withdrawn() {
                self.withdrawn(delivery.as_ref(), &message.id).await;
                continue;
            }
            let settled = match carried.take_if(|carried| carried.at == at) {
                Some(Carried {
                    failure, deferred, ..
                }) => {
                    self.settle_failure(delivery.as_ref(), message, failure, deferred, handled)
                        .await
                }
                None => self.one_by_one(delivery.as_ref(), message, handled).await,
            };
            if let Err(outage) = settled {
                let unsettled = ready[at..].iter().map(|(d, _)| Arc::clone(d)).collect();
                return Err((outage, unsettled));
            }
        }
        Ok(())
    }

    /// Records a delivery withdrawn because of another message, where the broker counted it
    /// (SQS FIFO), so that it does not count against its own message.
    async fn withdrawn<D: Delivery>(&self, delivery: &D, id: &MessageId) {
        if !delivery.counts_withdrawn() {
            return;
        }
        if let Err(err) = self.inbox.withdrawn(&self.pool, &self.name, id).await {
            tracing::warn!(handler = %self.name, id = %id, error = %err, "cannot record a withdrawn delivery; it may count against the message");
        }
    }

    /// Claims the whole batch and runs the handler for its fresh messages on one transaction,
    /// running `next` while it commits. Any failure before the commit rolls it all back, and
    /// the batch goes through one by one.
    async fn in_one_transaction<D: Delivery, F: Future>(
        &self,
        ready: &[(Arc<D>, Arc<Message>)],
        next: &mut Next<F>,
    ) -> Batched {
        let work = async {
            let mut tx = self.inbox.begin(&self.pool).await.map_err(Stopped::Store)?;
            let ids: Vec<MessageId> = ready.iter().map(|(_, m)| m.id.clone()).collect();
            let fresh: HashSet<MessageId> = self
                .inbox
                .claim_batch(&mut tx, &self.name, &ids)
                .await
                .map_err(Stopped::Store)?
                .into_iter()
                .collect();
            let mut ran = HashSet::new();
            for (at, (_, message)) in ready.iter().enumerate() {
                // An id twice in one batch runs once.
                if fresh.contains(&message.id) && ran.insert(message.id.clone()) {
                    // As on its own: outbound calls derive their keys from this message.
                    let parent = format!("{}:{}", self.name, message.id);
                    let (ran, deferred) = guestlist_carry::watch_deferral(guestlist_carry::scope(
                        parent,
                        self.run_handler(&mut tx, message),
                    ))
                    .await;
                    if let Err(failure) = ran {
                        return Err(Stopped::Handler(Carried {
                            at,
                            failure,
                            deferred,
                        }));
                    }
                }
            }
            Ok::<_, Stopped>((tx, fresh))
        };
        let (tx, fresh) = match work.await {
            Ok(done) => done,
            Err(Stopped::Handler(carried)) => {
                tracing::info!(handler = %self.name, id = %ready[carried.at].1.id, error = %carried.failure, "batch rolled back; handling its messages one by one");
                // A deferral or a failure of the message's own is its outcome; a handler that
                // met a down database or another transaction runs again on its own, where the
                // inbox retries a deadlock and an outage is held.
                let own = carried.deferred.is_some()
                    || failure_kind(&carried.failure) != FailureKind::Outage;
                return Batched::RolledBack(own.then_some(carried));
            }
            Err(Stopped::Store(err)) => {
                tracing::info!(handler = %self.name, error = %err, "batch rolled back; handling its messages one by one");
                return Batched::RolledBack(None);
            }
        };
        // The next batch is fetched while this one's commit waits on the disk.
        let committed = match next {
            Next::Waiting(fetch) => {
                let (committed, fetched) = tokio::join!(tx.commit(), fetch.as_mut());
                *next = Next::Fetched(fetched);
                committed
            }
            Next::Fetched(_) => tx.commit().await,
        };
        match committed {
            Ok(()) => Batched::Committed(fresh),
            Err(err) => {
                tracing::info!(handler = %self.name, error = %err, "batch commit failed; handling its messages one by one");
                Batched::CommitFailed
            }
        }
    }

    /// One message on its own transaction (with the inbox's retries), then its acknowledgement.
    async fn one_by_one<D: Delivery>(
        &self,
        delivery: &D,
        message: &Arc<Message>,
        handled: &mut Handled,
    ) -> Result<(), Outage> {
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
                return self
                    .settle_failure(delivery, message, failure, deferred, handled)
                    .await;
            }
            Err(ProcessError::Store(err)) if err.kind() == FailureKind::Outage => {
                return Err(Outage(format!("the database: {err}")));
            }
            Err(err) => {
                // The store failed, not the message: back it goes, without counting against it.
                tracing::warn!(handler = %self.name, id = %message.id, error = %err, "store failed; the message comes back later");
                let _ = delivery.nak(self.backoff.0).await;
            }
        }
        Ok(())
    }

    /// A handler run failed on `message`: a deferral sends it back for its wait; a down
    /// database (the handler's own query met it) holds it; anything else counts against it.
    async fn settle_failure<D: Delivery>(
        &self,
        delivery: &D,
        message: &Message,
        failure: Failure,
        deferred: Option<Deferral>,
        handled: &mut Handled,
    ) -> Result<(), Outage> {
        if let Some(deferral) = deferred.or_else(|| failure.deferral().cloned()) {
            return self.defer(delivery, message, &deferral, handled).await;
        }
        if let Some(outage) = Outage::of("the database, as the handler met it", &failure) {
            return Err(outage);
        }
        let failed = self.failed_deliveries(delivery, &message.id).await?;
        handled.failed += 1;
        self.count("failed", 1);
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
        Ok(())
    }

    /// A handler said "not yet": the message goes back for the delay it asked, without counting
    /// as a failure, unless it has been deferred for longer than `max_deferral`.
    async fn defer<D: Delivery>(
        &self,
        delivery: &D,
        message: &Message,
        deferral: &Deferral,
        handled: &mut Handled,
    ) -> Result<(), Outage> {
        let deferrals = match self.inbox.defer(&self.pool, &self.name, &message.id).await {
            Ok(deferrals) => deferrals,
            Err(err) => {
                if let Some(outage) = Outage::of("the database, counting a deferral", &err) {
                    return Err(outage);
                }
                // Uncounted, it must not pass for a deferral: back it goes as after a store failure.
                tracing::warn!(handler = %self.name, id = %message.id, error = %err, "cannot count a deferral; the message comes back later");
                let _ = delivery.nak(self.backoff.0).await;
                return Ok(());
            }
        };
        let age = deferrals.age();
        if age >= self.max_deferral {
            let why = format!(
                "deferred {} times over {age:?}, past the consumer's max_deferral of {:?}; the last: {deferral}",
                deferrals.count, self.max_deferral
            );
            self.dead_letter(delivery, &message.id, &why, handled).await;
            return Ok(());
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
        Ok(())
    }

    /// The deliveries of `delivery`'s message so far (this one included) that count against
    /// it: failures, and runs the consumer died in; not deferrals, nor deliveries withdrawn
    /// because of another message.
    async fn failed_deliveries<D: Delivery>(
        &self,
        delivery: &D,
        id: &MessageId,
    ) -> Result<u32, Outage> {
        let count = delivery.delivery_count();
        if count <= 1 {
            return Ok(count);
        }
        match self.inbox.deferrals(&self.pool, &self.name, id).await {
            Ok(deferrals) => Ok(count
                .saturating_sub(deferrals.map_or(0, |d| d.count))
                .max(1)),
            Err(err) => {
                if let Some(outage) = Outage::of("the database, reading deferrals", &err) {
                    return Err(outage);
                }
                tracing::warn!(handler = %self.name, id = %id, error = %err, "cannot read the message's deferrals; counting every delivery as a failure");
                Ok(count)
            }
        }
    }

    /// Whether the inbox already holds `id` for this handler ([`Inbox::holds`]). `false` when
    /// the database refuses to say for a reason other than an outage.
    async fn already_handled(&self, id: &MessageId) -> Result<bool, Outage> {
        match self.inbox.holds(&self.pool, &self.name, id).await {
            Ok(held) => Ok(held),
            Err(err) => {
                if let Some(outage) =
                    Outage::of("the database, asking whether a message was handled", &err)
                {
                    return Err(outage);
                }
                tracing::warn!(handler = %self.name, id = %id, error = %err, "cannot tell whether the message was handled; counting its deliveries as failures");
                Ok(false)
            }
        }
    }

    /// Whether the inbox's tables are there and the database answers ([`Inbox::check`]).
    pub(crate) async fn probe(&self) -> Result<(), guestlist_sqlx::Error> {
        self.inbox.check(&self.pool, &self.name).await
    }

    /// Forgets a handled message's deferrals, if it may have any.
    async fn forget_deferrals<D: Delivery>(&self, delivery: &D, id: &MessageId) {
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

    async fn ack<D: Delivery>(&self, delivery: &D) {
        if let Err(err) = delivery.ack().await {
            // Committed already: the redelivery will be a duplicate, acknowledged then.
            tracing::warn!(handler = %self.name, error = %err, "acknowledgement failed; the redelivery will be a duplicate");
        }
    }

    /// Dead-letters the message `id` and forgets its deferrals.
    async fn dead_letter<D: Delivery>(
        &self,
        delivery: &D,
        id: &MessageId,
        why: &str,
        handled: &mut Handled,
    ) {
        tracing::error!(handler = %self.name, id = %id, reason = why, "dead-lettering a message");
        self.dead_letter_only(delivery, why, handled).await;
        self.forget_deferrals(delivery, id).await;
    }

    /// Moves a delivery to the dead-letter place.
    async fn dead_letter_only<D: Delivery>(&self, delivery: &D, why: &str, handled: &mut Handled) {
        handled.dead_lettered += 1;
        self.count("dead_lettered", 1);
        if let Err(err) = delivery.dead_letter(why).await {
            tracing::error!(handler = %self.name, error = %err, "cannot dead-letter the message; the broker redelivers it");
        }
    }

    /// Keeps `held`'s deliveries alive while they are worked on (or held through an outage),
    /// where the broker needs it.
    fn keep_alive_while<D: Delivery>(
        &self,
        held: &[Arc<D>],
    ) -> Option<tokio::task::JoinHandle<()>> {
        let ack_wait = self.ack_wait?;
        if !self.keep_alive || held.is_empty() {
            return None;
        }
        let deliveries: Vec<Arc<D>> = held.to_vec();
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

/// Stops a keep-alive task.
fn stop_keep_alive(keep_alive: Option<tokio::task::JoinHandle<()>>) {
    if let Some(keep_alive) = keep_alive {
        keep_alive.abort();
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
