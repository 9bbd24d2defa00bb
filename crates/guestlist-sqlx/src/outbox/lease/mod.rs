//! The shards a relay holds, each under its own lease and token, judged together on the
//! process's monotonic clock (the protocol's [`HeldLease`] for their timing); how the relay
//! keeps them is [`keep`].

mod keep;

use std::collections::{BTreeMap, BTreeSet};
use std::time::{Duration, Instant};

use guestlist_core::protocol::HeldLease;

use crate::backend::PendingRow;

/// The shards this relay holds. Their leases are renewed together, by every stamp and every
/// renewal, and lost together: a renewal that finds one token gone counts as losing them all
/// (the relay gives the rest back and takes its share again), so a round never publishes a
/// shard it no longer holds.
#[derive(Debug, Clone)]
pub(crate) struct Leases {
    /// The table's shard count they were taken under.
    pub(crate) count: u32,
    /// Each held shard's token.
    tokens: BTreeMap<u32, i64>,
    /// Shards given back once the batch in hand is stamped: no more of their rows are read.
    leaving: BTreeSet<u32>,
    /// When the earliest of the leases stops being usable, and when they are due for renewal.
    timing: HeldLease<Instant>,
}

impl Leases {
    /// `shard` taken with `token` under a count of `count`, for `length`, by a request sent
    /// at `asked_at`.
    pub(crate) fn taken(
        count: u32,
        shard: u32,
        token: i64,
        length: Duration,
        asked: Instant,
    ) -> Self {
        Self {
            count,
            tokens: BTreeMap::from([(shard, token)]),
            leaving: BTreeSet::new(),
            timing: HeldLease::taken(0, length, asked),
        }
    }

    /// Adds `shard`, taken with `token`: its lease runs longer than the others', which stay
    /// the ones the timing follows.
    pub(crate) fn add(&mut self, shard: u32, token: i64) {
        self.tokens.insert(shard, token);
    }

    /// Every held shard with its token, as the statements that renew them bind them.
    pub(crate) fn held(&self) -> Vec<(u32, i64)> {
        self.tokens.iter().map(|(s, t)| (*s, *t)).collect()
    }

    /// The token `shard` is held under, if held.
    pub(crate) fn token(&self, shard: u32) -> Option<i64> {
        self.tokens.get(&shard).copied()
    }

    /// The held shards.
    pub(crate) fn shards(&self) -> BTreeSet<u32> {
        self.tokens.keys().copied().collect()
    }

    /// The shards whose rows a round reads: held, and not being given back.
    pub(crate) fn publishing(&self) -> Vec<u32> {
        self.tokens
            .keys()
            .filter(|shard| !self.leaving.contains(shard))
            .copied()
            .collect()
    }

    /// Whether `row` belongs to a shard this relay publishes.
    pub(crate) fn publishes(&self, row: &PendingRow) -> bool {
        let shard = row.shard(self.count);
        self.tokens.contains_key(&shard) && !self.leaving.contains(&shard)
    }

    /// Marks `shards` to be given back once the batch in hand is stamped.
    pub(crate) fn leave(&mut self, shards: &[u32]) {
        self.leaving
            .extend(shards.iter().filter(|s| self.tokens.contains_key(s)));
    }

    /// The shards being given back, with their tokens, forgotten here: the caller releases
    /// them.
    pub(crate) fn take_leaving(&mut self) -> Vec<(u32, i64)> {
        let leaving = std::mem::take(&mut self.leaving);
        leaving
            .into_iter()
            .filter_map(|shard| self.tokens.remove(&shard).map(|token| (shard, token)))
            .collect()
    }

    /// Whether shards are being given back.
    pub(crate) fn is_leaving(&self) -> bool {
        !self.leaving.is_empty()
    }

    /// How many shards are held.
    pub(crate) fn len(&self) -> usize {
        self.tokens.len()
    }

    /// Records a renewal of every lease sent at `asked`.
    pub(crate) fn renewed(&mut self, asked: Instant) {
        self.timing.renewed(asked);
    }

    /// Whether the relay may still publish under the leases at `now`.
    pub(crate) fn usable(&self, now: Instant) -> bool {
        self.timing.usable(now)
    }

    /// Whether an idle relay should renew at `now`.
    pub(crate) fn due(&self, now: Instant) -> bool {
        self.timing.due(now)
    }
}
