//! What becomes of a message that did not go through: a deferral waits as asked, a failure
//! counts against the message (deferrals and withdrawals aside) until it is dead-lettered, and
//! a message handled already is a duplicate however often it came.

use std::time::Duration;

use guestlist_core::protocol::{AfterDeferral, Redelivery};
use guestlist_core::{Deferral, FailureKind, MessageId};
use guestlist_sqlx::{Backend, DeadCopy, failure_kind};

use crate::failure::Failure;
use crate::handled::Handled;
use crate::outage::Outage;
use crate::runtime::Core;
use crate::{Delivery, Handler, Message};

impl<DB: Backend, H: Handler<DB>> Core<DB, H> {
    /// A handler run failed on `message`: a deferral sends it back for its wait; a down
    /// database (the handler's own query met it) holds it; anything else counts against it.
    pub(crate) async fn settle_failure<D: Delivery>(
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
            message.outcome("outage");
            return Err(outage);
        }
        if failure_kind(&failure) == FailureKind::Withdrawn {
            // Another run of its steps took the message over and finishes it: back it goes,
            // uncounted, to be a duplicate then.
            message.outcome("withdrawn");
            tracing::info!(handler = %self.name, id = %message.id, error = %failure, "another run took the message over; it comes back later");
            self.hand_back(delivery, &message.id, self.backoff.0).await;
            return Ok(());
        }
        let failed = self.failed_deliveries(delivery, &message.id).await?;
        handled.failed += 1;
        self.count("failed", 1);
        if self.limits().poison_after_failure(failed) {
            let why = format!(
                "failed on delivery {failed} of {} (deferrals aside): {failure}",
                self.max_deliveries
            );
            message.outcome("poison");
            self.dead_letter(delivery, &message.id, &why, handled).await;
        } else {
            message.outcome("failed");
            let delay = self.delay(failed);
            tracing::warn!(handler = %self.name, id = %message.id, error = %failure, ?delay, "handler failed; the message comes back later");
            self.hand_back(delivery, &message.id, delay).await;
        }
        Ok(())
    }

    /// A handler said "not yet": the message goes back for the delay it asked, without counting
    /// as a failure, unless it has been deferred for longer than `max_deferral`.
    pub(crate) async fn defer<D: Delivery>(
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
                self.hand_back(delivery, &message.id, self.backoff.0).await;
                return Ok(());
            }
        };
        let age = deferrals.age();
        let AfterDeferral::Again(delay) = self.limits().after_deferral(age, deferral.after())
        else {
            let why = format!(
                "deferred {} times over {age:?}, past the consumer's max_deferral of {:?}; the last: {deferral}",
                deferrals.count, self.max_deferral
            );
            message.outcome("poison");
            self.dead_letter(delivery, &message.id, &why, handled).await;
            return Ok(());
        };
        message.outcome("deferred");
        handled.deferred += 1;
        self.count("deferred", 1);
        tracing::info!(handler = %self.name, id = %message.id, reason = deferral.reason(), ?delay, deferrals = deferrals.count, "not yet; the message comes back later");
        self.hand_back(delivery, &message.id, delay).await;
        Ok(())
    }

    /// Hands message `id` back to be delivered again after `delay` (where the broker refuses,
    /// it redelivers after its ack wait anyway); the later messages of its key wait for it.
    pub(crate) async fn hand_back<D: Delivery>(
        &self,
        delivery: &D,
        id: &MessageId,
        delay: Duration,
    ) {
        if let Some(key) = self.key_from.key_of(delivery, 0).held() {
            self.held.hold(key, id, delay);
        }
        self.nak(delivery, delay).await;
    }

    /// Sends `delivery` back for `delay`, logging a refusal.
    pub(crate) async fn nak<D: Delivery>(&self, delivery: &D, delay: Duration) {
        if let Err(err) = delivery.nak(delay).await {
            tracing::warn!(handler = %self.name, error = %err, "cannot hand the message back; the broker redelivers it after its ack wait");
        }
    }

    /// The deliveries of `delivery`'s message so far (this one included) that count against
    /// it: failures, and runs the consumer died in; not deferrals, nor deliveries withdrawn
    /// because of another message.
    pub(crate) async fn failed_deliveries<D: Delivery>(
        &self,
        delivery: &D,
        id: &MessageId,
    ) -> Result<u32, Outage> {
        let count = delivery.delivery_count();
        if count <= 1 {
            return Ok(count);
        }
        match self.inbox.deferrals(&self.pool, &self.name, id).await {
            Ok(deferrals) => Ok(Redelivery::counted(count, deferrals.map_or(0, |d| d.count))),
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
    pub(crate) async fn already_handled(&self, id: &MessageId) -> Result<bool, Outage> {
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

    /// A message is done with (handled, a duplicate, dead-lettered): its key flows again if it
    /// was held for it, and its deferrals are forgotten, if it may have any.
    pub(crate) async fn done_with<D: Delivery>(&self, delivery: &D, id: &MessageId) {
        if !self.held.is_empty()
            && let Some(key) = self.key_from.key_of(delivery, 0).held()
        {
            self.held.release(key, id);
        }
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

    /// The consumer's limits, as the protocol's rules take them.
    pub(crate) fn limits(&self) -> Redelivery {
        Redelivery {
            max_deliveries: self.max_deliveries,
            max_deferral: self.max_deferral,
        }
    }

    fn delay(&self, delivery_count: u32) -> Duration {
        let (first, max) = self.backoff;
        first
            .saturating_mul(2u32.saturating_pow(delivery_count.saturating_sub(1).min(16)))
            .min(max)
    }

    pub(crate) async fn ack<D: Delivery>(&self, delivery: &D) {
        if let Err(err) = delivery.ack().await {
            // Committed already: the redelivery will be a duplicate, acknowledged then.
            tracing::warn!(handler = %self.name, error = %err, "acknowledgement failed; the redelivery will be a duplicate");
        }
    }

    /// Dead-letters the message `id` and forgets its deferrals.
    pub(crate) async fn dead_letter<D: Delivery>(
        &self,
        delivery: &D,
        id: &MessageId,
        why: &str,
        handled: &mut Handled,
    ) {
        tracing::error!(handler = %self.name, id = %id, reason = why, "dead-lettering a message");
        if self.dead_letter_only(delivery, why, handled).await {
            // Beside the guest list, for operators (guestlist console, guestlist history).
            let deliveries = delivery.delivery_count();
            let (topic, key) = (delivery.return_topic(), delivery.key());
            let headers = kept_headers(delivery.headers());
            let copy = DeadCopy {
                topic: topic.as_deref(),
                key: key.as_deref(),
                headers: &headers,
                body: delivery.payload(),
            };
            let recorded = self
                .inbox
                .record_dead(&self.pool, &self.name, id, why, deliveries, copy)
                .await;
            if let Err(err) = recorded {
                tracing::warn!(handler = %self.name, id = %id, error = %err,
                    "dead-lettered, but not recorded in the inbox's dead letters (run the inbox's migrate to create its table)");
            }
        }
        self.done_with(delivery, id).await;
    }

    /// Moves a delivery to the dead-letter place: `true` once it is there.
    pub(crate) async fn dead_letter_only<D: Delivery>(
        &self,
        delivery: &D,
        why: &str,
        handled: &mut Handled,
    ) -> bool {
        handled.dead_lettered += 1;
        self.count("dead_lettered", 1);
        match delivery.dead_letter(why).await {
            Ok(_) => true,
            Err(err) => {
                tracing::error!(handler = %self.name, error = %err, "cannot dead-letter the message; the broker redelivers it");
                false
            }
        }
    }
}

/// The headers a dead letter's copy keeps: the message's own, without those its broker set
/// (a retry is a new message to it, which sets its own).
fn kept_headers(headers: Vec<(String, String)>) -> Vec<(String, String)> {
    const BROKERS: [&str; 3] = ["nats-", "x-death", "x-delivery-count"];
    const DEATH: [&str; 2] = ["x-first-death-", "x-last-death-"];
    headers
        .into_iter()
        .filter(|(name, _)| {
            let lower = name.to_ascii_lowercase();
            !BROKERS
                .iter()
                .chain(&DEATH)
                .any(|prefix| lower.starts_with(prefix))
        })
        .collect()
}
