//! Keys held back behind a message that went back to the broker: a key's later messages do not
//! overtake the one that failed or deferred, but wait for it, while every other key flows.

use std::collections::{HashMap, VecDeque};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use guestlist_core::MessageId;
use guestlist_sqlx::Backend;

use crate::handled::Handled;
use crate::outage::{Held, Outage};
use crate::runtime::Core;
use crate::{Delivery, Handler, Message};

/// How long past its expected return a key stays held for a message that went back, counted in
/// the consumer's fetches (see [`HeldKeys::batch_fetched`]): long enough for a redelivery that
/// comes a little late, short enough that a message taken by another consumer does not hold its
/// key here for long.
const GRACE: Duration = Duration::from_secs(5);

/// How much later than the message they wait for the held messages come back, so that the
/// broker hands that one out first.
const BEHIND: Duration = Duration::from_millis(50);

/// The most keys held at once: past it the oldest hold goes (its key's order then rests on the
/// broker's redelivery order alone), so that memory stays bounded whatever fails.
const MOST: usize = 10_000;

/// The most messages queued behind one key's hold (see [`HeldKeys::behind`]).
const MOST_BEHIND: usize = 1_000;

/// The keys held back, each by the message it waits for and until when.
#[derive(Debug, Default)]
pub(crate) struct HeldKeys {
    held: Mutex<Holds>,
}

#[derive(Debug, Default)]
struct Holds {
    by_key: HashMap<String, Hold>,
    /// When the fetch that brought the batch in hand began: a hold lapses only once the
    /// consumer fetched again well past the message's return and it did not come.
    fetched_at: Option<Instant>,
}

/// A key held back by the message `by`, expected back at `back_at`, and the messages sent back
/// to wait behind it, in the order they were sent: when `by` is done, the first of them holds
/// the key in turn, so that a later message of the key fetched before they come back does not
/// overtake them.
#[derive(Debug, Clone)]
struct Hold {
    by: MessageId,
    back_at: Instant,
    behind: VecDeque<MessageId>,
}

impl Hold {
    /// Whether this hold has lapsed, the batch in hand fetched at `fetched_at`: a fetch began
    /// `GRACE` past its message's return, and what it brought (that batch or an earlier one) did
    /// not release it. Time spent not fetching (a database outage holding a batch, a slow lane)
    /// never lapses a hold: the message held for could not have come back meanwhile.
    fn lapsed(&self, fetched_at: Option<Instant>) -> bool {
        fetched_at.is_some_and(|fetched| self.back_at + GRACE <= fetched)
    }
}

impl Holds {
    fn prune(&mut self) {
        let fetched_at = self.fetched_at;
        self.by_key.retain(|key, hold| {
            let lapsed = hold.lapsed(fetched_at);
            if lapsed {
                tracing::debug!(key, by = %hold.by, "a key's hold lapsed: the message it waited for did not come back; its later messages flow");
            }
            !lapsed
        });
    }
}

impl HeldKeys {
    fn lock(&self) -> std::sync::MutexGuard<'_, Holds> {
        self.held.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The batch now in hand came from a fetch that began at `at`.
    pub(crate) fn batch_fetched(&self, at: Instant) {
        let mut held = self.lock();
        held.fetched_at = Some(at);
        held.prune();
    }

    /// Message `id` of `key` went back to the broker for `delay`: the key's other messages wait
    /// for it.
    pub(crate) fn hold(&self, key: &str, id: &MessageId, delay: Duration) {
        let mut held = self.lock();
        held.prune();
        if held.by_key.len() >= MOST
            && !held.by_key.contains_key(key)
            && let Some(oldest) = held
                .by_key
                .iter()
                .min_by_key(|(_, hold)| hold.back_at)
                .map(|(key, _)| key.clone())
        {
            held.by_key.remove(&oldest);
        }
        let back_at = Instant::now() + delay;
        match held.by_key.get_mut(key) {
            Some(hold) => {
                hold.behind.retain(|waiting| waiting != id);
                hold.by = id.clone();
                hold.back_at = back_at;
            }
            None => {
                held.by_key.insert(
                    key.to_owned(),
                    Hold {
                        by: id.clone(),
                        back_at,
                        behind: VecDeque::new(),
                    },
                );
            }
        }
    }

    /// Message `id` of `key` went back to wait behind the message its key is held by: it holds
    /// the key in turn once that one is done. Past [`MOST_BEHIND`] a key's messages still wait
    /// behind those queued, but are not queued themselves.
    pub(crate) fn behind(&self, key: &str, id: &MessageId) {
        let mut held = self.lock();
        if let Some(hold) = held.by_key.get_mut(key)
            && &hold.by != id
            && hold.behind.len() < MOST_BEHIND
            && !hold.behind.contains(id)
        {
            hold.behind.push_back(id.clone());
        }
    }

    /// Message `id` of `key` is done with (handled, a duplicate, dead-lettered): if its key was
    /// held for it, the first message that waited behind it holds the key now (it comes back
    /// with the others that waited, a moment after `id` was due), or else the key flows again.
    pub(crate) fn release(&self, key: &str, id: &MessageId) {
        let mut held = self.lock();
        let Some(hold) = held.by_key.get_mut(key) else {
            return;
        };
        if &hold.by != id {
            hold.behind.retain(|waiting| waiting != id);
            return;
        }
        match hold.behind.pop_front() {
            Some(next) => {
                hold.by = next;
                hold.back_at = (hold.back_at + BEHIND).max(Instant::now());
            }
            None => {
                held.by_key.remove(key);
            }
        }
    }

    /// Whether message `id` of `key` must wait behind another one of its key: the message it
    /// waits for, and when it comes back itself. The key's messages that went back (the one it
    /// is held by, then those sent back behind it, in order) run before it: it waits for the
    /// first of them that is not `ahead` of it in the batch in hand. Every message waiting
    /// behind one comes back at the same moment, whenever it was sent back: the broker (or
    /// Kafka's parked records) then hands them out in their order, not in the order their
    /// sends happened to end.
    pub(crate) fn waits(
        &self,
        key: &str,
        id: &MessageId,
        ahead: impl Fn(&MessageId) -> bool,
    ) -> Option<(MessageId, Instant)> {
        let held = self.lock();
        let hold = held.by_key.get(key)?;
        if hold.lapsed(held.fetched_at) {
            return None;
        }
        let missing = std::iter::once(&hold.by)
            .chain(&hold.behind)
            .take_while(|went_back| *went_back != id)
            .find(|went_back| !ahead(went_back))?;
        Some((missing.clone(), hold.back_at + BEHIND))
    }

    /// Whether no key is held: the common case, checked without looking further.
    pub(crate) fn is_empty(&self) -> bool {
        self.lock().by_key.is_empty()
    }
}

impl<DB: Backend, H: Handler<DB>> Core<DB, H> {
    /// The messages of `ready` that may run now: one whose key is held behind messages that
    /// went back (and do not run earlier in this batch) is sent back to wait behind them.
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
            let Some(wait) = self.must_wait(delivery.as_ref(), message, &may_run) else {
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
    /// itself: it comes again at `back_at`, after that one, and the wait does not count against
    /// it. The delay is reckoned as it is sent back, after the write before it, however long
    /// that took.
    pub(crate) async fn wait_behind<D: Delivery>(
        &self,
        delivery: &D,
        message: &Message,
        back_at: Instant,
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
        if let Some(key) = self.key_from.key_of(delivery, 0).held() {
            self.held.behind(key, &message.id);
        }
        message.outcome("held back");
        handled.held_back += 1;
        self.count("held_back", 1);
        let wait = back_at.saturating_duration_since(Instant::now());
        tracing::debug!(handler = %self.name, id = %message.id, ?wait, "an earlier message of its key went back; this one waits behind it");
        self.nak(delivery, wait).await;
        Ok(())
    }

    /// When `message` comes back, waiting behind the earlier messages of its key that went
    /// back, if it must wait: not where they all run before it among `ahead` (earlier in the
    /// same batch).
    pub(crate) fn must_wait<D: Delivery>(
        &self,
        delivery: &D,
        message: &Message,
        ahead: &[(Arc<D>, Arc<Message>)],
    ) -> Option<Instant> {
        if self.held.is_empty() {
            return None;
        }
        let key = self.key_from.key_of(delivery, 0);
        let runs_ahead = |id: &MessageId| ahead.iter().any(|(_, earlier)| &earlier.id == id);
        let (_, wait) = self.held.waits(key.held()?, &message.id, runs_ahead)?;
        Some(wait)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn id(s: &str) -> MessageId {
        MessageId::new(s).unwrap()
    }

    /// What message `of` of order-1 waits for, nothing running ahead of it.
    fn held_by(keys: &HeldKeys, of: &str) -> Option<MessageId> {
        keys.waits("order-1", &id(of), |_| false).map(|(by, _)| by)
    }

    #[test]
    fn a_key_waits_for_the_message_that_went_back_and_flows_once_it_is_done() {
        let keys = HeldKeys::default();
        assert_eq!(keys.waits("order-1", &id("b"), |_| false), None);
        keys.hold("order-1", &id("a"), Duration::from_secs(2));
        let (by, back_at) = keys
            .waits("order-1", &id("b"), |_| false)
            .expect("b waits behind a");
        assert_eq!(by, id("a"));
        let wait = back_at.saturating_duration_since(Instant::now());
        assert!(wait > Duration::from_secs(1) && wait <= Duration::from_secs(2) + BEHIND);
        let (_, again) = keys.waits("order-1", &id("c"), |_| false).unwrap();
        assert_eq!(again, back_at, "every waiter comes back at the same moment");
        assert_eq!(
            keys.waits("order-1", &id("a"), |_| false),
            None,
            "a itself runs"
        );
        assert_eq!(
            keys.waits("order-2", &id("c"), |_| false),
            None,
            "other keys flow"
        );
        keys.release("order-1", &id("b"));
        assert!(
            keys.waits("order-1", &id("b"), |_| false).is_some(),
            "only a releases"
        );
        keys.release("order-1", &id("a"));
        assert_eq!(keys.waits("order-1", &id("b"), |_| false), None);
        assert!(keys.is_empty());
    }

    #[test]
    fn a_hold_whose_message_never_came_back_lapses_once_a_fetch_began_well_past_it() {
        let keys = HeldKeys::default();
        keys.hold("order-1", &id("a"), Duration::ZERO);
        let due = Instant::now();
        keys.batch_fetched(due + GRACE - Duration::from_millis(1));
        assert!(
            keys.waits("order-1", &id("b"), |_| false).is_some(),
            "a may still come"
        );
        keys.batch_fetched(due + GRACE);
        assert_eq!(keys.waits("order-1", &id("b"), |_| false), None);
        assert!(keys.is_empty(), "pruned");
    }

    #[test]
    fn a_hold_never_lapses_while_the_batch_in_hand_was_fetched_before_its_message_came_back() {
        // A database outage holds b in hand for longer than a's delay and the grace: a could not
        // have been fetched meanwhile, so b still waits behind it.
        let keys = HeldKeys::default();
        keys.batch_fetched(Instant::now());
        keys.hold("order-1", &id("a"), Duration::from_millis(10));
        std::thread::sleep(Duration::from_millis(20));
        if let Some(hold) = keys.lock().by_key.get_mut("order-1") {
            hold.back_at -= GRACE; // as if the outage had lasted that long
        }
        assert_eq!(held_by(&keys, "b"), Some(id("a")));
    }

    #[test]
    fn a_message_sent_back_behind_another_holds_its_key_in_turn() {
        let keys = HeldKeys::default();
        keys.hold("order-1", &id("a"), Duration::ZERO);
        keys.behind("order-1", &id("b"));
        keys.behind("order-1", &id("b"));
        keys.release("order-1", &id("a"));
        assert_eq!(
            held_by(&keys, "c"),
            Some(id("b")),
            "c, fetched before b came back, waits behind b"
        );
        keys.behind("order-1", &id("c"));
        assert_eq!(
            keys.waits("order-1", &id("b"), |_| false),
            None,
            "b itself runs"
        );
        keys.release("order-1", &id("b"));
        assert_eq!(
            held_by(&keys, "d"),
            Some(id("c")),
            "b queued once: c holds next"
        );
        keys.release("order-1", &id("c"));
        assert!(keys.is_empty());

        // Released out of turn (the waiters ran in a's batch, after it), the queue empties too.
        keys.hold("order-1", &id("a"), Duration::ZERO);
        keys.behind("order-1", &id("b"));
        keys.release("order-1", &id("b"));
        keys.release("order-1", &id("a"));
        assert!(keys.is_empty());

        // The held message failing again keeps the queue behind it.
        keys.hold("order-1", &id("a"), Duration::ZERO);
        keys.behind("order-1", &id("b"));
        keys.hold("order-1", &id("a"), Duration::from_secs(1));
        keys.release("order-1", &id("a"));
        assert_eq!(held_by(&keys, "c"), Some(id("b")));
    }

    #[test]
    fn a_message_runs_in_a_batch_only_behind_every_message_of_its_key_that_went_back() {
        let keys = HeldKeys::default();
        keys.hold("order-1", &id("a"), Duration::ZERO);
        keys.behind("order-1", &id("b"));
        let ahead =
            |ids: &'static [&'static str]| move |m: &MessageId| ids.iter().any(|i| id(i) == *m);
        let waits_for = |of: &str, before: &'static [&'static str]| {
            keys.waits("order-1", &id(of), ahead(before))
                .map(|(by, _)| by)
        };
        assert_eq!(
            waits_for("d", &["a"]),
            Some(id("b")),
            "a ahead, b not: d waits for b"
        );
        assert_eq!(waits_for("d", &["a", "b"]), None, "both ahead");
        assert_eq!(waits_for("b", &[]), Some(id("a")), "b waits for a");
        assert_eq!(waits_for("b", &["a"]), None, "b runs after a");
        assert_eq!(waits_for("a", &[]), None, "a itself runs");
    }

    #[test]
    fn a_keys_queue_is_bounded() {
        let keys = HeldKeys::default();
        keys.hold("order-1", &id("a"), Duration::ZERO);
        for n in 0..MOST_BEHIND + 10 {
            keys.behind("order-1", &id(&format!("m{n}")));
        }
        assert_eq!(keys.lock().by_key["order-1"].behind.len(), MOST_BEHIND);
        assert!(
            keys.waits("order-1", &id("m1009"), |_| false).is_some(),
            "one past the bound still waits"
        );
    }
}
