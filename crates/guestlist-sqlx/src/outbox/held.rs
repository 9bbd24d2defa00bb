//! The ordering keys a relay holds back: each one's head failed, and nothing after it on its key
//! goes out until the head is confirmed or dead-lettered.

use std::collections::HashMap;
use std::time::{Duration, Instant};

use guestlist_core::Backoff;

use crate::backend::PendingRow;

/// A key whose head the broker refused: the head is tried again alone, after its own backoff,
/// while the rest of the outbox flows.
#[derive(Debug)]
pub(crate) struct HeldKey {
    /// The key's first pending message, the one that failed.
    pub(crate) head: PendingRow,
    /// Failures counted against the head (poison).
    pub(crate) failures: u32,
    /// The last failure's text.
    pub(crate) error: String,
    backoff: Backoff,
    retry_at: Instant,
}

/// The keys held back, by ordering key; a message without a key is held by its row id.
#[derive(Debug, Default)]
pub(crate) struct HeldKeys {
    keys: HashMap<Holding, HeldKey>,
}

/// What a held message holds back: its ordering key, or only itself.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub(crate) enum Holding {
    Key(String),
    Row(i64),
}

impl Holding {
    pub(crate) fn of(row: &PendingRow) -> Self {
        match &row.ordering_key {
            Some(key) => Holding::Key(key.clone()),
            None => Holding::Row(row.id),
        }
    }
}

impl HeldKeys {
    /// Counts a failure of `row` against it, holding its key back: the new failure count.
    pub(crate) fn failed(
        &mut self,
        row: &PendingRow,
        error: String,
        (first, max): (Duration, Duration),
    ) -> u32 {
        let held = self
            .keys
            .entry(Holding::of(row))
            .or_insert_with(|| HeldKey {
                head: row.clone(),
                failures: 0,
                error: String::new(),
                backoff: Backoff::new(first, max),
                retry_at: Instant::now(),
            });
        held.failures += 1;
        held.error = error;
        held.retry_at = Instant::now() + held.backoff.next_pause();
        held.failures
    }

    /// Lets `row`'s key go: its head was confirmed or dead-lettered.
    pub(crate) fn release(&mut self, row: &PendingRow) -> Option<HeldKey> {
        let holding = Holding::of(row);
        match self.keys.get(&holding) {
            Some(held) if held.head.id == row.id => self.keys.remove(&holding),
            _ => None,
        }
    }

    /// The heads due to be tried again now, at most `max`, oldest first.
    pub(crate) fn due(&self, max: usize) -> Vec<PendingRow> {
        let now = Instant::now();
        let mut due: Vec<&HeldKey> = self
            .keys
            .values()
            .filter(|held| held.retry_at <= now)
            .collect();
        due.sort_by_key(|held| held.head.id);
        due.into_iter()
            .take(max)
            .map(|held| held.head.clone())
            .collect()
    }

    /// How long until the next head is due, if any is held.
    pub(crate) fn next_due_in(&self) -> Option<Duration> {
        self.keys
            .values()
            .map(|held| held.retry_at.saturating_duration_since(Instant::now()))
            .min()
    }

    /// The held ordering keys, to leave out of the read of pending rows.
    pub(crate) fn keys(&self) -> Vec<String> {
        self.keys
            .keys()
            .filter_map(|holding| match holding {
                Holding::Key(key) => Some(key.clone()),
                Holding::Row(_) => None,
            })
            .collect()
    }

    /// The held heads' row ids, to leave out of the read of pending rows.
    pub(crate) fn rows(&self) -> Vec<i64> {
        self.keys.values().map(|held| held.head.id).collect()
    }

    /// The held keys' last errors, for a warning.
    pub(crate) fn causes(&self) -> Vec<String> {
        let mut causes: Vec<String> = self.keys.values().map(|held| held.error.clone()).collect();
        causes.sort();
        causes.dedup();
        causes
    }

    pub(crate) fn len(&self) -> usize {
        self.keys.len()
    }

    pub(crate) fn is_empty(&self) -> bool {
        self.keys.is_empty()
    }

    /// Forgets every held key: the lease was lost, and the next holder finds them again.
    pub(crate) fn clear(&mut self) {
        self.keys.clear();
    }

    /// Forgets the held keys whose head `keep` refuses: their shard is given back, and its
    /// next holder finds them again.
    pub(crate) fn retain(&mut self, keep: impl Fn(&PendingRow) -> bool) {
        self.keys.retain(|_, held| keep(&held.head));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn row(id: i64, key: Option<&str>) -> PendingRow {
        PendingRow::for_test(id, key)
    }

    #[test]
    fn a_held_key_waits_its_doubling_turn_and_lets_go_on_its_head_only() {
        let mut held = HeldKeys::default();
        let pause = (Duration::from_millis(50), Duration::from_secs(5));
        assert_eq!(held.failed(&row(1, Some("a")), "no route".into(), pause), 1);
        assert_eq!(held.failed(&row(2, None), "no route".into(), pause), 1);
        assert_eq!(held.keys(), vec!["a".to_owned()]);
        assert!(held.due(10).is_empty(), "each waits its first pause");
        std::thread::sleep(Duration::from_millis(60));
        assert_eq!(held.due(10).len(), 2);
        assert_eq!(held.failed(&row(1, Some("a")), "no route".into(), pause), 2);
        assert!(
            held.next_due_in().unwrap() <= Duration::from_millis(50),
            "row 2 is due"
        );
        assert!(held.release(&row(3, Some("a"))).is_none(), "not the head");
        assert!(held.release(&row(1, Some("a"))).is_some());
        assert_eq!(held.len(), 1);
    }
}
