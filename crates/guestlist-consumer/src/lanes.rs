//! Keys in parallel: a batch's messages split by ordering key ([`KeyFrom`](crate::KeyFrom))
//! into lanes, up to the consumer's concurrency, each lane a batch of its own (claimed, handled
//! and committed on its own transaction, then acknowledged), the lanes at once. A key's messages
//! are all in one lane, in the broker's order; the next batch starts once every lane is settled,
//! so a key's later messages never overtake its earlier ones.

use std::collections::HashMap;
use std::future::{Future, Ready};
use std::sync::Arc;

use guestlist_sqlx::Backend;

use crate::handled::Handled;
use crate::key_from::OrderKey;
use crate::next_fetch::Next;
use crate::outage::Held;
use crate::runtime::Core;
use crate::{Delivery, Handler, Message};

impl<DB: Backend, H: Handler<DB>> Core<DB, H> {
    /// The messages of `ready` in lanes by key, each lane settled as a batch of its own, the
    /// lanes at once, with `next` (the next batch's fetch) run meanwhile. `None` where they are
    /// all of one key: the consumer goes on with one batch, as usual.
    pub(crate) async fn in_lanes<D: Delivery, F: Future>(
        &self,
        ready: &[(Arc<D>, Arc<Message>)],
        handled: &mut Handled,
        next: &mut Next<F>,
    ) -> Option<Result<(), Held<D>>> {
        let keys: Vec<OrderKey> = ready
            .iter()
            .enumerate()
            .map(|(at, (delivery, _))| self.key_from.key_of(delivery.as_ref(), at))
            .collect();
        let lanes = split(&keys, self.concurrency);
        if lanes.len() < 2 {
            return None;
        }
        metrics::histogram!("guestlist_consumer_lanes", "handler" => self.name.as_str().to_owned())
            .record(lanes.len() as f64);
        let runs = lanes.into_iter().map(|lane| {
            let lane: Vec<(Arc<D>, Arc<Message>)> =
                lane.into_iter().map(|at| ready[at].clone()).collect();
            async move {
                let mut handled = Handled::default();
                // Nothing to fetch beside a lane's commit: the batch's next fetch runs beside
                // all of them.
                let mut no_fetch = Next::<Ready<()>>::Fetched(());
                let settled = self.settle_ready(&lane, &mut handled, &mut no_fetch).await;
                (handled, settled)
            }
        });
        let fetch = async {
            let fetched = match next {
                Next::Waiting(fetch) => fetch.as_mut().await,
                Next::Fetched(_) => return,
            };
            *next = Next::Fetched(fetched);
        };
        let (lanes, ()) = tokio::join!(futures_util::future::join_all(runs), fetch);
        let mut outage = None;
        let mut unsettled = Vec::new();
        for (by_lane, settled) in lanes {
            *handled += by_lane;
            if let Err((met, held)) = settled {
                outage.get_or_insert(met);
                unsettled.extend(held);
            }
        }
        Some(match outage {
            None => Ok(()),
            Some(outage) => Err((outage, unsettled)),
        })
    }
}

/// Splits a batch whose messages have `keys` (in the batch's order) into at most `lanes` lanes
/// of message indexes: each key's messages all in one lane, in the batch's order; the lanes
/// balanced by message count (the key with the most messages first, to the lane with the
/// fewest).
pub(crate) fn split(keys: &[OrderKey], lanes: usize) -> Vec<Vec<usize>> {
    let mut by_key: Vec<Vec<usize>> = Vec::new();
    let mut slots: HashMap<&OrderKey, usize> = HashMap::new();
    for (at, key) in keys.iter().enumerate() {
        let slot = *slots.entry(key).or_insert_with(|| {
            by_key.push(Vec::new());
            by_key.len() - 1
        });
        by_key[slot].push(at);
    }
    let lanes = lanes.min(by_key.len()).max(1);
    by_key.sort_by_key(|messages| std::cmp::Reverse(messages.len()));
    let mut split: Vec<Vec<usize>> = vec![Vec::new(); lanes];
    for messages in by_key {
        let lane = split
            .iter_mut()
            .min_by_key(|lane| lane.len())
            .expect("at least one lane");
        lane.extend(messages);
    }
    for lane in &mut split {
        lane.sort_unstable();
    }
    split
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key(k: &str) -> OrderKey {
        OrderKey::Key(Some(k.to_owned()))
    }

    #[test]
    fn each_keys_messages_stay_in_one_lane_in_order() {
        let keys = [key("a"), key("b"), key("a"), key("c"), key("a"), key("b")];
        let lanes = split(&keys, 16);
        assert_eq!(lanes, vec![vec![0, 2, 4], vec![1, 5], vec![3]]);
    }

    #[test]
    fn lanes_are_balanced_and_never_more_than_asked() {
        let keys: Vec<OrderKey> = (0..100).map(OrderKey::Alone).collect();
        let lanes = split(&keys, 16);
        assert_eq!(lanes.len(), 16);
        assert!(lanes.iter().all(|lane| (6..=7).contains(&lane.len())));
        let mut all: Vec<usize> = lanes.concat();
        all.sort_unstable();
        assert_eq!(all, (0..100).collect::<Vec<_>>());
    }

    #[test]
    fn one_key_is_one_lane() {
        let keys = vec![OrderKey::Key(None); 5];
        assert_eq!(split(&keys, 16), vec![vec![0, 1, 2, 3, 4]]);
    }
}
