//! One batch, from its deliveries to their acknowledgements: claim, handle, commit, acknowledge;
//! one by one when the batch as a whole fails.

use std::collections::HashSet;
use std::future::Future;
use std::sync::Arc;
use std::time::{Duration, Instant};

use guestlist_core::{Claim, Deferral, HandlerName, MessageId, Retention};
use guestlist_sqlx::{Backend, Inbox, ProcessError, Processed, WorkError};
use sqlx::Pool;

use crate::consumer::Handled;
use crate::failure::Failure;
use crate::{BrokerError, Delivery, Handler, IdFrom, Message};

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
}

/// How a batch on one transaction ended.
enum Batched<F: Future> {
    /// Committed: the fresh ids, and what the next fetch brought.
    Committed(HashSet<MessageId>, F::Output),
    /// The commit failed (its outcome unknown); the next fetch ran meanwhile.
    CommitFailed(F::Output),
    /// Rolled back before the commit (or never tried, for a single message); the next fetch has
    /// not started.
    RolledBack(F),
}

impl<DB: Backend, H: Handler<DB>> Core<DB, H> {
    /// Handles one fetched batch to its end, running `next` (the next batch's fetch) while the
    /// batch commits, and returns what it fetched.
    pub(crate) async fn handle<D: Delivery, F>(
        &self,
        deliveries: Vec<D>,
        handled: &mut Handled,
        next: F,
    ) -> F::Output
    where
        F: Future<Output = Result<Vec<D>, BrokerError>>,
    {
        // A delivery the source took back before it was handled (Kafka: its partition moved,
        // or an earlier record of it was handed back) comes again: it is not counted now.
        let deliveries: Vec<D> = deliveries.into_iter().filter(|d| !d.withdrawn()).collect();
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
                // A copy of a message already handled (its deferrals forgotten then) is a
                // duplicate however often it was delivered, never poison.
                if failed > self.max_deliveries && self.already_handled(&id).await {
                    handled.duplicates += 1;
                    self.count("duplicate", 1);
                    self.ack(&delivery).await;
                    continue;
                }
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
            return next.await;
        }
        let keep_alive = self.keep_alive_while(&ready);
        // One message goes on its own (with the inbox's retries); several, in one transaction.
        let batched = if ready.len() > 1 {
            self.in_one_transaction(&ready, next).await
        } else {
            Batched::RolledBack(next)
        };
        let (fresh, fetched) = match batched {
            Batched::Committed(fresh, fetched) => (Some(fresh), fetched),
            Batched::CommitFailed(fetched) => {
                // Its outcome unknown: one by one, each finds out (fresh, or a duplicate).
                self.all_one_by_one(&ready, handled).await;
                (None, fetched)
            }
            Batched::RolledBack(next) => {
                self.all_one_by_one(&ready, handled).await;
                (None, next.await)
            }
        };
        if let Some(fresh) = fresh {
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
            for (delivery, message) in &ready {
                self.forget_deferrals(delivery.as_ref(), &message.id).await;
            }
        }
        if let Some(keep_alive) = keep_alive {
            keep_alive.abort();
        }
        fetched
    }

    /// Each message of `ready` on its own transaction, then its acknowledgement.
    async fn all_one_by_one<D: Delivery>(
        &self,
        ready: &[(Arc<D>, Arc<Message>)],
        handled: &mut Handled,
    ) {
        for (delivery, message) in ready {
            // A message handed back withdraws the later ones of its partition (Kafka): they
            // come again after it.
            if !delivery.withdrawn() {
                self.one_by_one(delivery.as_ref(), message, handled).await;
            }
        }
    }

    /// Claims the whole batch and runs the handler for its fresh messages on one transaction,
    /// running `next` while it commits. Any failure before the commit rolls it all back, and
    /// the batch goes through one by one.
    async fn in_one_transaction<D: Delivery, F: Future>(
        &self,
        ready: &[(Arc<D>, Arc<Message>)],
        next: F,
    ) -> Batched<F> {
        let work = async {
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
                    // As on its own: outbound calls derive their keys from this message.
                    let parent = format!("{}:{}", self.name, message.id);
                    guestlist_carry::scope(parent, self.run_handler(&mut tx, message))
                        .await
                        .map_err(|e| e.to_string())?;
                }
            }
            Ok::<_, String>((tx, fresh))
        };
        let (tx, fresh) = match work.await {
            Ok(done) => done,
            Err(why) => {
                tracing::info!(handler = %self.name, error = %why, "batch rolled back; handling its messages one by one");
                return Batched::RolledBack(next);
            }
        };
        // The next batch is fetched while this one's commit waits on the disk.
        let (committed, fetched) = tokio::join!(tx.commit(), next);
        match committed {
            Ok(()) => Batched::Committed(fresh, fetched),
            Err(err) => {
                tracing::info!(handler = %self.name, error = %err, "batch commit failed; handling its messages one by one");
                Batched::CommitFailed(fetched)
            }
        }
    }

    /// One message on its own transaction (with the inbox's retries), then its acknowledgement.
    async fn one_by_one<D: Delivery>(
        &self,
        delivery: &D,
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
    async fn defer<D: Delivery>(
        &self,
        delivery: &D,
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
    async fn failed_deliveries<D: Delivery>(&self, delivery: &D, id: &MessageId) -> u32 {
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

    /// Whether the inbox already holds `id` for this handler, asked the inbox's way: a claim on
    /// a transaction that is then rolled back (it waits for a claim in flight to end). `false`
    /// when the database cannot say.
    async fn already_handled(&self, id: &MessageId) -> bool {
        let claimed = async {
            let mut tx = self.inbox.begin(&self.pool).await?;
            let claim = self.inbox.claim(&mut *tx, &self.name, id).await?;
            tx.rollback().await?;
            Ok::<_, guestlist_sqlx::Error>(claim)
        };
        match claimed.await {
            Ok(claim) => claim == Claim::Duplicate,
            Err(err) => {
                tracing::warn!(handler = %self.name, id = %id, error = %err, "cannot tell whether the message was handled; counting its deliveries as failures");
                false
            }
        }
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

    /// Keeps `ready`'s deliveries alive while they are worked on, where the broker needs it.
    fn keep_alive_while<D: Delivery>(
        &self,
        ready: &[(Arc<D>, Arc<Message>)],
    ) -> Option<tokio::task::JoinHandle<()>> {
        let ack_wait = self.ack_wait?;
        if !self.keep_alive {
            return None;
        }
        let deliveries: Vec<Arc<D>> = ready.iter().map(|(d, _)| d.clone()).collect();
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
