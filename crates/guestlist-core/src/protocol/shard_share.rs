//! An outbox's shards shared among the relays that run: which shard a row belongs to, each
//! relay's fair share, and the moves that bring a relay to it. Every relay computes the same
//! shares from the same registry of relays, so no relay hands shards out; a relay releases its
//! surplus and takes free shards up to its share, through each shard's own lease
//! ([`RelayLeaseRow`](super::RelayLeaseRow)).

use std::collections::BTreeSet;

use sha2::{Digest, Sha256};

/// The slots rows are spread over: a row's slot never changes, and its shard is its slot modulo
/// the table's shard count, so the count can change without rewriting a row.
pub const SLOTS: u32 = 1 << 16;

/// The slot of a row: the first two bytes, big-endian, of the SHA-256 of its ordering key, or of
/// its message id when it has no key (so keyless rows spread too). A service in another language
/// writing rows computes the same.
pub fn slot(ordering_key: Option<&str>, message_id: &str) -> u16 {
    let digest = Sha256::digest(ordering_key.unwrap_or(message_id).as_bytes());
    u16::from_be_bytes([digest[0], digest[1]])
}

/// The shard of `slot` when the table has `shards` shards (at least one).
pub fn shard_of(slot: u16, shards: u32) -> u32 {
    u32::from(slot) % shards.max(1)
}

/// How many of `shards` (at least one, at most [`SLOTS`]) the relay `me` should hold while
/// `relays` run (the registry's live relays, each with how many shards it holds now, in any
/// order): `shards / relays`, one more for the first `shards % relays` relays, those holding
/// the most first, then in the order of their ids. Ranking the holders first keeps a relay that
/// comes back (resumed, reconnected) from taking a shard back from the one that took it over
/// when there are fewer shards than relays. 0 when `me` is not among them (not yet registered,
/// or counted dead).
pub fn quota(me: &str, relays: &[(impl AsRef<str>, u32)], shards: u32) -> u32 {
    let shards = shards.clamp(1, SLOTS);
    let mut ranked: Vec<(&str, u32)> = relays
        .iter()
        .map(|(id, held)| (id.as_ref(), *held))
        .collect();
    ranked.sort_unstable_by(|a, b| b.1.cmp(&a.1).then(a.0.cmp(b.0)));
    ranked.dedup_by(|a, b| a.0 == b.0);
    let Some(rank) = ranked.iter().position(|(id, _)| *id == me) else {
        return 0;
    };
    let n = ranked.len() as u32;
    shards / n + u32::from((rank as u32) < shards % n)
}

/// What a relay does next with its shards.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ShardMoves {
    /// Shards it holds beyond its share: it stamps what it published on them, then releases
    /// their leases at once.
    pub release: Vec<u32>,
    /// Free shards (lease ended or released) it tries to take, in the order to try them: as many
    /// as it lacks, each relay preferring its own order, so that relays joining together rarely
    /// reach for the same shard.
    pub take: Vec<u32>,
}

impl ShardMoves {
    /// The moves of relay `me` holding `held`, whose share of the table's `shards` is `quota`,
    /// when `free` are the shards no relay holds. Shards past the count (it was lowered) go
    /// first, then the surplus, highest-numbered first; a relay at its share moves nothing, so
    /// a join moves only the shards the newcomer takes.
    pub fn plan(me: &str, quota: u32, shards: u32, held: &BTreeSet<u32>, free: &[u32]) -> Self {
        let shards = shards.clamp(1, SLOTS);
        let quota = quota as usize;
        let (kept, mut release): (Vec<u32>, Vec<u32>) =
            held.iter().partition(|shard| **shard < shards);
        if kept.len() > quota {
            release.extend(kept.iter().rev().take(kept.len() - quota));
        }
        if !release.is_empty() {
            return Self {
                release,
                take: Vec::new(),
            };
        }
        let mut candidates: Vec<u32> = free
            .iter()
            .copied()
            .filter(|shard| *shard < shards && !held.contains(shard))
            .collect();
        candidates.sort_unstable_by_key(|shard| preference(me, *shard));
        candidates.dedup();
        candidates.truncate(quota - kept.len());
        Self {
            release: Vec::new(),
            take: candidates,
        }
    }

    /// Whether the relay is at its share.
    pub fn settled(&self) -> bool {
        self.release.is_empty() && self.take.is_empty()
    }
}

/// Relay `me`'s rank for `shard` (rendezvous hashing): each relay orders the free shards its
/// own way.
fn preference(me: &str, shard: u32) -> [u8; 8] {
    let mut hash = Sha256::new();
    hash.update(me.as_bytes());
    hash.update(shard.to_be_bytes());
    let digest = hash.finalize();
    let mut rank = [0; 8];
    rank.copy_from_slice(&digest[..8]);
    rank
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::BTreeMap;

    #[test]
    fn a_rows_slot_is_its_keys_and_a_keyless_row_spreads_by_its_id() {
        assert_eq!(
            slot(Some("order-42"), "evt_1"),
            slot(Some("order-42"), "evt_2")
        );
        // `printf order-42 | sha256sum` begins 3bf8: the slot another language computes too.
        assert_eq!(slot(Some("order-42"), "x"), 0x3bf8);
        let keyless: BTreeSet<u32> = (0..200)
            .map(|n| shard_of(slot(None, &format!("evt_{n}")), 16))
            .collect();
        assert_eq!(
            keyless.len(),
            16,
            "200 keyless rows reach every one of 16 shards"
        );
        assert_eq!(shard_of(65_535, 0), 0, "no shards counts as one");
    }

    #[test]
    fn shares_add_up_differ_by_one_at_most_and_leave_the_unregistered_out() {
        for relays in 1..=7 {
            let ids: Vec<(String, u32)> = (0..relays).map(|n| (format!("relay-{n}"), 0)).collect();
            for shards in [1, 4, 16, 17, 64] {
                let shares: Vec<u32> = ids.iter().map(|(id, _)| quota(id, &ids, shards)).collect();
                assert_eq!(
                    shares.iter().sum::<u32>(),
                    shards,
                    "{relays} relays, {shards}"
                );
                let (min, max) = (shares.iter().min(), shares.iter().max());
                assert!(max.unwrap() - min.unwrap() <= 1, "{shares:?}");
            }
        }
        assert_eq!(quota("late", &[("a", 0), ("b", 0)], 16), 0);
        assert_eq!(
            quota("a", &[("a", 0), ("b", 0)], 0),
            1,
            "no shards counts as one"
        );
        assert_eq!(
            quota("b", &[("b", 0), ("a", 0), ("b", 0)], 3),
            1,
            "order and repeats do not matter"
        );
        assert_eq!(
            (
                quota("a", &[("a", 0), ("b", 1)], 1),
                quota("b", &[("a", 0), ("b", 1)], 1)
            ),
            (0, 1),
            "the one shard stays with the relay that holds it"
        );
    }

    /// Relays join one by one (the last with the lowest id, so that every share shifts), then
    /// one leaves, then the table's shard count is lowered; each step every relay plans on the
    /// same registry and the holdings it sees, releases first, then takes what is still free (in
    /// turn, as the leases' takes would let them). No shard ever has two holders, every relay
    /// ends at its share, every shard is held and none past the count, and a join moves no more
    /// shards than the newcomer's share.
    #[test]
    fn relays_that_join_and_leave_settle_on_fair_disjoint_shares() {
        let settle = |registry: &[String], shards: u32, holders: &mut BTreeMap<u32, String>| {
            let mut moved = 0;
            let shares = |holders: &BTreeMap<u32, String>| -> Vec<(String, u32)> {
                registry
                    .iter()
                    .map(|id| {
                        (
                            id.clone(),
                            holders.values().filter(|h| *h == id).count() as u32,
                        )
                    })
                    .collect()
            };
            for _round in 0..4 {
                for me in registry {
                    let held: BTreeSet<u32> = holders
                        .iter()
                        .filter(|(_, holder)| *holder == me)
                        .map(|(shard, _)| *shard)
                        .collect();
                    let free: Vec<u32> = (0..shards).filter(|s| !holders.contains_key(s)).collect();
                    let share = quota(me, &shares(holders), shards);
                    let moves = ShardMoves::plan(me, share, shards, &held, &free);
                    for shard in &moves.release {
                        assert_eq!(holders.remove(shard).as_ref(), Some(me), "its own");
                    }
                    for shard in moves.take {
                        assert!(holders.insert(shard, me.clone()).is_none(), "taken twice");
                        moved += 1;
                    }
                }
            }
            let settled = shares(holders);
            for (me, held) in &settled {
                assert_eq!(*held, quota(me, &settled, shards), "{me} at its share");
            }
            let held: Vec<u32> = holders.keys().copied().collect();
            assert_eq!(
                held,
                (0..shards).collect::<Vec<_>>(),
                "every shard held, none past"
            );
            moved
        };
        let mut holders: BTreeMap<u32, String> = BTreeMap::new();
        let mut registry: Vec<String> = Vec::new();
        for newcomer in ["relay-1", "relay-2", "relay-3", "relay-0"] {
            registry.push(newcomer.to_owned());
            let moved = settle(&registry, 17, &mut holders);
            let share = holders.values().filter(|h| *h == newcomer).count();
            assert!(moved <= share, "{newcomer} joining moved {moved} shards");
        }
        // relay-1 stops: its shards are released (or their leases end) and the rest take them.
        registry.retain(|id| id != "relay-1");
        holders.retain(|_, holder| holder != "relay-1");
        settle(&registry, 17, &mut holders);
        // The count lowered to 5: shards 5 and up are given back, and 0..5 shared anew.
        settle(&registry, 5, &mut holders);
    }
}
