//! Keys held back behind a message that went back to the broker: a key's later messages do not
//! overtake the one that failed or deferred, but wait for it, while every other key flows.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use guestlist_core::MessageId;
use guestlist_sqlx::Backend;

use crate::handled::Handled;
use crate::outage::{Held, Outage};
use crate::runtime::Core;
use crate::{Delivery, Handler, Message};

/// How long past its expected return a key stays held for a message that went back: long enough
/// for a redelivery that comes a little late, short enough that a message taken by another
/// consumer does not hold its key here for long.
const GRACE: Duration = Duration::from_secs(5);

/// How much later than the message they wait for the held messages come back, so that the
/// broker hands that one out first.
const BEHIND: Duration = Duration::from_millis(50);

/// The most keys held at once: past it the oldest hold goes (its key's order then rests on the
/// broker's redelivery order alone), so that memory stays bounded whatever fails.
const MOST: usize = 10_000;

/// The keys held back, each by the message it waits for and until when.
#[derive(Debug, Default)]
pub(crate) struct HeldKeys {
    held: Mutex<HashMap<String, Hold>>,
}

/// A key held back by the message `by`, expected back at `back_at`.
#[derive(Debug, Clone)]
struct Hold {
    by: MessageId,
    back_at: Instant,
}

impl HeldKeys {
    /// Message `id` of `key` went back to the broker for `delay`: the key's other messages wait
    /// for it.
    pub(crate) fn hold(&self, key: &str, id: &MessageId, delay: Duration) {
        let now = Instant::now();
        let mut held = self.held.lock().unwrap_or_else(|e| e.into_inner());
        held.retain(|_, hold| hold.back_at + GRACE > now);
        if held.len() >= MOST
            && !held.contains_key(key)
            && let Some(oldest) = held
                .iter()
                .min_by_key(|(_, hold)| hold.back_at)
                .map(|(key, _)| key.clone())
        {
            held.remove(&oldest);
        }
        let back_at = now + delay;
        held.insert(
            key.to_owned(),
            Hold {
                by: id.clone(),
                back_at,
            },
        );
    }

    /// Message `id` of `key` is done with (handled, a duplicate, dead-lettered): if its key was
    /// held for it, the key flows again.
    pub(crate) fn release(&self, key: &str, id: &MessageId) {
        let mut held = self.held.lock().unwrap_or_else(|e| e.into_inner());
        if held.get(key).is_some_and(|hold| &hold.by == id) {
            held.remove(key);
        }
    }

    /// Whether message `id` of `key` must wait behind another one of its key: the message it
    /// waits for, and how long it goes back for.
    pub(crate) fn waits(&self, key: &str, id: &MessageId) -> Option<(MessageId, Duration)> {
        let held = self.held.lock().unwrap_or_else(|e| e.into_inner());
        let hold = held.get(key)?;
        let now = Instant::now();
        if &hold.by == id || hold.back_at + GRACE <= now {
            return None;
        }
        let wait = hold.back_at.saturating_duration_since(now) + BEHIND;
        Some((hold.by.clone(), wait))
    }

    /// Whether no key is held: the common case, checked without looking further.
    pub(crate) fn is_empty(&self) -> bool {
        self.held
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .is_empty()
    }
}

impl<DB: Backend, H: Handler<DB>> Core<DB, H> {
    /// The messages of `ready` that may run now: one whose key is held behind a message that
    /// went back (and is not earlier in this batch) is sent back to wait behind it.
    pub(crate) async fn not_held<D: Delivery>(
        &self,
        ready: Vec<(Arc<D>, Arc<Message>)>,
        handled: &mut Handled,
    ) -> Result<Vec<(Arc<D>, Arc<Message>)>, Held<D>> {
        if self.held.is_empty() {
            return Ok(ready);
        }
        let mut may_run = Vec::with_capacity(ready.len());
        for (at, (delivery, message)) in ready.iter().enumerate() {
            let Some(wait) = self.must_wait(delivery.as_ref(), message, &ready[..at]) else {
                may_run.push((Arc::clone(delivery), Arc::clone(message)));
                continue;
            };
            if let Err(outage) = self
                .wait_behind(delivery.as_ref(), message, wait, handled)
                .await
            {
                let mut unsettled: Vec<Arc<D>> = may_run.into_iter().map(|(d, _)| d).collect();
                unsettled.extend(ready[at..].iter().map(|(d, _)| Arc::clone(d)));
                return Err((outage, unsettled));
            }
        }
        Ok(may_run)
    }

    /// Sends back a message that must wait behind an earlier one of its key, which went back
    /// itself: it comes again after that one, and the wait does not count against it.
    pub(crate) async fn wait_behind<D: Delivery>(
        &self,
        delivery: &D,
        message: &Message,
        wait: Duration,
        handled: &mut Handled,
    ) -> Result<(), Outage> {
        if let Err(err) = self
            .inbox
            .withdrawn(&self.pool, &self.name, &message.id)
            .await
        {
            if let Some(outage) = Outage::of("the database, recording a wait behind a key", &err) {
                return Err(outage);
            }
            tracing::warn!(handler = %self.name, id = %message.id, error = %err, "cannot record a wait behind the message's key; it may count against the message");
        }
        message.outcome("held back");
        handled.held_back += 1;
        self.count("held_back", 1);
        tracing::debug!(handler = %self.name, id = %message.id, ?wait, "an earlier message of its key went back; this one waits behind it");
        self.nak(delivery, wait).await;
        Ok(())
    }

    /// How long `message` must wait behind an earlier message of its key that went back, if it
    /// must: not where that message is among `ahead` (earlier in the same batch, it runs first).
    pub(crate) fn must_wait<D: Delivery>(
        &self,
        delivery: &D,
        message: &Message,
        ahead: &[(Arc<D>, Arc<Message>)],
    ) -> Option<Duration> {
        if self.held.is_empty() {
            return None;
        }
        let key = self.key_from.key_of(delivery, 0);
        let (by, wait) = self.held.waits(key.held()?, &message.id)?;
        (!ahead.iter().any(|(_, earlier)| earlier.id == by)).then_some(wait)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn id(s: &str) -> MessageId {
        MessageId::new(s).unwrap()
    }

    #[test]
    fn a_key_waits_for_the_message_that_went_back_and_flows_once_it_is_done() {
        let keys = HeldKeys::default();
        assert_eq!(keys.waits("order-1", &id("b")), None);
        keys.hold("order-1", &id("a"), Duration::from_secs(2));
        let (by, wait) = keys.waits("order-1", &id("b")).expect("b waits behind a");
        assert_eq!(by, id("a"));
        assert!(wait > Duration::from_secs(1) && wait <= Duration::from_secs(2) + BEHIND);
        assert_eq!(keys.waits("order-1", &id("a")), None, "a itself runs");
        assert_eq!(keys.waits("order-2", &id("c")), None, "other keys flow");
        keys.release("order-1", &id("b"));
        assert!(keys.waits("order-1", &id("b")).is_some(), "only a releases");
        keys.release("order-1", &id("a"));
        assert_eq!(keys.waits("order-1", &id("b")), None);
        assert!(keys.is_empty());
    }

    #[test]
    fn a_hold_whose_message_never_came_back_lapses() {
        let keys = HeldKeys::default();
        keys.hold("order-1", &id("a"), Duration::ZERO);
        if let Some(hold) = keys.held.lock().unwrap().get_mut("order-1") {
            hold.back_at = Instant::now() - GRACE;
        }
        assert_eq!(keys.waits("order-1", &id("b")), None);
    }
}
