//! One batch, from its deliveries to their acknowledgements: claim, handle, commit, acknowledge;
//! one by one when the batch as a whole fails.

use std::collections::HashSet;
use std::future::Future;
use std::sync::Arc;
use std::time::Instant;

use guestlist_core::{Backoff, Deferral, FailureKind, MessageId};
use guestlist_sqlx::{Backend, failure_kind};
use tracing::Instrument;

use crate::failure::{Failure, timed};
use crate::handled::Handled;
use crate::next_fetch::Next;
use crate::outage::{Held, Outage};
use crate::retried::Addressed;
use crate::runtime::Core;
use crate::shutdown::Stop;
use crate::{BoxError, Delivery, Handler, Message};

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
    /// Handles one fetched batch (from a fetch that began at `fetched_at`) to its end, running
    /// `next` (the next batch's fetch) while the batch commits, and returns what it fetched.
    ///
    /// While the database is down nothing is counted against a message and nothing is handed
    /// back (a hand-back raises the broker's delivery count): the deliveries still unsettled are
    /// held and kept alive, the outage is reported on [`Health`], and they are tried again after
    /// a doubling pause until the database answers. Nothing more is fetched meanwhile. Asked to
    /// `stop` then, it lets what it holds go back to the broker unsettled, and returns.
    pub(crate) async fn handle<D: Delivery, F>(
        &self,
        deliveries: Vec<D>,
        fetched_at: Instant,
        handled: &mut Handled,
        next: F,
        stop: &mut Stop,
    ) -> F::Output
    where
        F: Future<Output = Result<Vec<D>, BoxError>>,
    {
        self.held.batch_fetched(fetched_at);
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
        drop(keep_alive);
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
        let ready = self.not_held(ready, handled).await?;
        if ready.is_empty() {
            return Ok(false);
        }
        if ready.len() > 1
            && self.together
            && let Some(settled) = self.side_by_side(&ready, handled).await
        {
            return settled.map(|()| true);
        }
        if ready.len() > 1
            && self.concurrency > 1
            && let Some(settled) = self.in_lanes(&ready, handled, next).await
        {
            return settled.map(|()| true);
        }
        self.settle_ready(&ready, handled, next).await?;
        Ok(true)
    }

    /// Settles the admitted messages of `ready`: one on its own (with the inbox's retries);
    /// several in one transaction, unless the handler runs in steps; one by one when that
    /// transaction fails.
    pub(crate) async fn settle_ready<D: Delivery, F: Future>(
        &self,
        ready: &[(Arc<D>, Arc<Message>)],
        handled: &mut Handled,
        next: &mut Next<F>,
    ) -> Result<(), Held<D>> {
        let carried = if ready.len() > 1 && self.handler.batches() {
            match self.in_one_transaction(ready, next).await {
                Batched::Committed(fresh) => {
                    self.settle_committed(ready, &fresh, handled).await;
                    return Ok(());
                }
                // Its outcome unknown: one by one, each finds out (fresh, or a duplicate).
                Batched::CommitFailed => None,
                Batched::RolledBack(carried) => carried,
            }
        } else {
            None
        };
        self.all_one_by_one(ready, carried, handled).await
    }

    /// The message of `delivery`, to be handled; `None` when it was settled here instead: no
    /// id (dead-lettered), or past the delivery limit (a duplicate acknowledged, or poison
    /// dead-lettered).
    async fn admit<D: Delivery>(
        &self,
        delivery: &Arc<D>,
        handled: &mut Handled,
    ) -> Result<Option<Arc<Message>>, Outage> {
        let found = match crate::retried::addressed(delivery.as_ref(), &self.name) {
            Addressed::Anyone => self.id_from.id_of(delivery.as_ref()),
            Addressed::This(id) => Ok(id),
            Addressed::Invalid(why) => Err(why),
            Addressed::Another => {
                // Another handler's dead letter put back on a subject or topic this one reads.
                handled.for_other_handlers += 1;
                self.count("for_another_handler", 1);
                self.ack(delivery.as_ref()).await;
                return Ok(None);
            }
        };
        let id = match found {
            Ok(id) => id,
            Err(why) => {
                tracing::error!(handler = %self.name, reason = %why, "dead-lettering a message");
                self.dead_letter_only(delivery.as_ref(), &format!("no message id: {why}"), handled)
                    .await;
                return Ok(None);
            }
        };
        if self.limits().check_on_arrival(delivery.delivery_count()) {
            let failed = self.failed_deliveries(delivery.as_ref(), &id).await?;
            if self.limits().poison_on_arrival(failed) {
                // A copy of a message already handled (its deferrals forgotten then) is a
                // duplicate however often it was delivered, never poison.
                if self.already_handled(&id).await? {
                    handled.duplicates += 1;
                    self.count("duplicate", 1);
                    self.ack(delivery.as_ref()).await;
                    self.done_with(delivery.as_ref(), &id).await;
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
        Ok(Some(Arc::new(Message::of(id, delivery, &self.name))))
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
            message.outcome(if fresh.contains(&message.id) {
                "fresh"
            } else {
                "duplicate"
            });
            self.done_with(delivery.as_ref(), &message.id).await;
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
                message.outcome("withdrawn");
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
                // A message whose key went back earlier in the batch waits behind it.
                None => match self.must_wait(delivery.as_ref(), message, &[]) {
                    Some(wait) => {
                        self.wait_behind(delivery.as_ref(), message, wait, handled)
                            .await
                    }
                    None => self.one_by_one(delivery.as_ref(), message, handled).await,
                },
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
    pub(crate) async fn withdrawn<D: Delivery>(&self, delivery: &D, id: &MessageId) {
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
    ///
    /// Not [`guestlist_sqlx::Inbox::process_batch`], on purpose, though both begin with
    /// `Inbox::begin`, claim with `Inbox::claim_batch` and commit once: that path hands all the
    /// fresh ids to one closure and retries the whole transaction on a deadlock, where the
    /// consumer runs its handler once per message (each in its own carried-key scope, span and
    /// deferral watch), must know which message failed so that the batch can go one by one with
    /// that run's outcome, and overlaps the commit with the next fetch. The story
    /// `a_batch_ends_as_the_inboxs_own_batch_path_ends` (every broker, every database) runs the
    /// same ids through both and fails if they drift apart.
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
                    let (ran, deferred) =
                        guestlist_core::watch_deferral(guestlist_carry::scope_message(
                            &self.name,
                            &message.id,
                            self.run_handler(&mut tx, message)
                                .instrument(message.handler_span()),
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
        let (outcome, deferred) = guestlist_core::watch_deferral(Arc::clone(&self.handler).alone(
            &self.inbox,
            &self.pool,
            &self.name,
            Arc::clone(message),
            self.handler_timeout,
        ))
        .instrument(message.span().clone())
        .await;
        self.settle_outcome(delivery, message, outcome, deferred, handled)
            .await
    }

    /// The handler, on `tx`, within the handler timeout.
    async fn run_handler(&self, tx: &mut DB::Connection, message: &Message) -> Result<(), Failure> {
        timed(self.handler_timeout, self.handler.handle(tx, message)).await
    }
}
