//! What this consumer holds of each assigned partition: the records in hand, the offset it may
//! commit, and rewinds to a record handed back.
//!
//! Kafka acknowledges by offset, not by message: committing offset `n` of a partition says
//! every record below `n` is done. So the offset to commit only moves past a record once that
//! record and every one before it (among those handed out) are settled. A record handed back
//! (a failed handler) rewinds its partition to it: the records after it that were already
//! fetched are withdrawn, and the partition is read again from the record, after the delay.
//! Each partition carries an *epoch*, raised by every rewind and every revocation; a record
//! fetched under an older epoch is stale and is never handled.

use std::collections::{BTreeMap, HashMap};
use std::sync::{Condvar, Mutex, MutexGuard, PoisonError};
use std::time::{Duration, Instant};

/// The partitions of one source, shared by the poll thread, the source and its deliveries.
#[derive(Debug, Default)]
pub(crate) struct Partitions {
    state: Mutex<State>,
    /// Signalled whenever a record in hand is settled or let go.
    settled: Condvar,
}

#[derive(Debug, Default)]
struct State {
    partitions: HashMap<i32, Partition>,
    /// Rewinds asked for and not yet carried out by the poll thread.
    rewinds: Vec<Rewind>,
    /// The last epoch given out: epochs never repeat, even across an assignment.
    last_epoch: u64,
}

#[derive(Debug)]
struct Partition {
    epoch: u64,
    /// Records handed out under this assignment and not yet let go, and records awaited
    /// again after a rewind.
    in_hand: BTreeMap<i64, Held>,
    /// The offset to commit: the first record not known to be done.
    next_commit: Option<i64>,
    /// Whether `next_commit` moved since the last commit.
    dirty: bool,
    /// A rewind is asked for: records polled before it is carried out are stale.
    rewinding: bool,
    /// Failed deliveries of records, by offset: Kafka does not count deliveries.
    failures: HashMap<i64, u32>,
}

/// Where a record of `in_hand` stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Held {
    /// Handed out, not yet done.
    Out,
    /// Done: its offset may be committed once every record before it is done.
    Settled,
    /// Handed back: the partition is read again from it, and nothing past it is committed
    /// until it is done.
    Awaited,
    /// Handed back while the consumer orders by key: handed out again from memory after its
    /// delay (see [`crate::parked`]), its partition going on; nothing past it is committed
    /// until it is done.
    Parked,
}

/// A partition to read again from `offset`, once `resume_at` has come.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Rewind {
    pub(crate) partition: i32,
    pub(crate) offset: i64,
    pub(crate) resume_at: Instant,
}

impl Partitions {
    fn lock(&self) -> MutexGuard<'_, State> {
        // The state is plain bookkeeping, whole after any panic between its statements.
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Partitions given to this consumer: each starts afresh at its committed offset.
    pub(crate) fn assigned(&self, partitions: impl IntoIterator<Item = i32>) {
        let mut state = self.lock();
        for partition in partitions {
            state.last_epoch += 1;
            let epoch = state.last_epoch;
            state.partitions.insert(
                partition,
                Partition {
                    epoch,
                    in_hand: BTreeMap::new(),
                    next_commit: None,
                    dirty: false,
                    rewinding: false,
                    failures: HashMap::new(),
                },
            );
        }
    }

    /// Partitions about to be taken away: records fetched and not yet handed out become
    /// stale at once; the records in hand are waited for (settled or let go) up to `wait`.
    /// Returns the offsets to commit before the partitions go, and forgets them.
    pub(crate) fn revoked(&self, partitions: &[i32], wait: Duration) -> Vec<(i32, i64)> {
        let deadline = Instant::now() + wait;
        let mut state = self.lock();
        for partition in partitions {
            state.last_epoch += 1;
            let epoch = state.last_epoch;
            if let Some(p) = state.partitions.get_mut(partition) {
                p.epoch = epoch;
            }
        }
        state.rewinds.retain(|r| !partitions.contains(&r.partition));
        loop {
            let held: usize = partitions
                .iter()
                .filter_map(|p| state.partitions.get(p))
                .map(|p| {
                    p.in_hand
                        .values()
                        .filter(|held| **held == Held::Out)
                        .count()
                })
                .sum();
            let now = Instant::now();
            if held == 0 || now >= deadline {
                if held > 0 {
                    tracing::warn!(
                        records = held,
                        ?wait,
                        "partitions revoked with records still in hand; the next owner reads them again"
                    );
                }
                break;
            }
            state = self
                .settled
                .wait_timeout(state, deadline - now)
                .unwrap_or_else(PoisonError::into_inner)
                .0;
        }
        partitions
            .iter()
            .filter_map(|partition| {
                let p = state.partitions.remove(partition)?;
                Some((*partition, p.next_commit?))
            })
            .collect()
    }

    /// The partitions assigned to this consumer now, in order.
    pub(crate) fn assigned_now(&self) -> Vec<i32> {
        let mut partitions: Vec<i32> = self.lock().partitions.keys().copied().collect();
        partitions.sort_unstable();
        partitions
    }

    /// The epoch under which a record just polled from `partition` is handed out; `None` when
    /// it is stale (the partition is not assigned, or a rewind is pending).
    pub(crate) fn epoch_for_poll(&self, partition: i32) -> Option<u64> {
        let state = self.lock();
        let p = state.partitions.get(&partition)?;
        (!p.rewinding).then_some(p.epoch)
    }

    /// Hands out the record at `offset`, polled under `epoch`: `None` when it went stale in
    /// between. Returns how many times it failed before.
    pub(crate) fn hand_out(&self, partition: i32, offset: i64, epoch: u64) -> Option<u32> {
        let mut state = self.lock();
        let p = state.partitions.get_mut(&partition)?;
        if p.epoch != epoch {
            return None;
        }
        p.in_hand.insert(offset, Held::Out);
        Some(p.failures.get(&offset).copied().unwrap_or(0))
    }

    /// Whether a record handed out under `epoch` was withdrawn since.
    pub(crate) fn withdrawn(&self, partition: i32, epoch: u64) -> bool {
        let state = self.lock();
        state
            .partitions
            .get(&partition)
            .is_none_or(|p| p.epoch != epoch)
    }

    /// The record at `offset` is done: the offset to commit moves past it if every record
    /// before it is done too.
    pub(crate) fn settle(&self, partition: i32, offset: i64) {
        let mut state = self.lock();
        if let Some(p) = state.partitions.get_mut(&partition)
            && let Some(held) = p.in_hand.get_mut(&offset)
            && *held == Held::Out
        {
            *held = Held::Settled;
            p.failures.remove(&offset);
            while let Some(entry) = p.in_hand.first_entry() {
                if *entry.get() != Held::Settled {
                    break;
                }
                p.next_commit = Some(*entry.key() + 1);
                p.dirty = true;
                entry.remove();
            }
        }
        drop(state);
        self.settled.notify_all();
    }

    /// Lets go of a withdrawn record without settling it: it will be read again.
    pub(crate) fn let_go(&self, partition: i32, offset: i64) {
        let mut state = self.lock();
        if let Some(p) = state.partitions.get_mut(&partition)
            && p.in_hand.get(&offset) == Some(&Held::Out)
        {
            p.in_hand.remove(&offset);
        }
        drop(state);
        self.settled.notify_all();
    }

    /// The record at `offset`, handed out under `epoch`, is parked to be handed out again:
    /// counted as a failure, and not committed past. `false` where its partition moved (or was
    /// sought back) since: it is read again anyway.
    pub(crate) fn park(&self, partition: i32, offset: i64, epoch: u64) -> bool {
        let mut state = self.lock();
        let Some(p) = state.partitions.get_mut(&partition) else {
            return false;
        };
        if p.epoch != epoch || p.in_hand.get(&offset) != Some(&Held::Out) {
            return false;
        }
        p.in_hand.insert(offset, Held::Parked);
        *p.failures.entry(offset).or_default() += 1;
        drop(state);
        self.settled.notify_all();
        true
    }

    /// Reads `partition` again from `offset` (a record handed out under `handed`) after
    /// `delay`: the records in hand from `offset` on are withdrawn. `failed` counts the delivery
    /// as a failure of the record.
    ///
    /// A record whose partition was sought back (or moved) since it was handed out is read
    /// again anyway: its failure is counted, but it moves no rewind (a rewind to it would drop
    /// the earlier one, and with it the record that rewind waits for).
    pub(crate) fn rewind(
        &self,
        partition: i32,
        offset: i64,
        handed: u64,
        delay: Duration,
        failed: bool,
    ) {
        let mut state = self.lock();
        state.last_epoch += 1;
        let epoch = state.last_epoch;
        let Some(p) = state.partitions.get_mut(&partition) else {
            return; // revoked meanwhile: the next owner starts from the committed offset
        };
        if p.epoch != handed {
            if failed {
                *p.failures.entry(offset).or_default() += 1;
            }
            return;
        }
        // A record parked below `offset` would go stale with this epoch (its copy in memory
        // is dropped when due) while its `Parked` mark held the commit below it for good: the
        // partition is read again from the earliest parked record instead.
        let offset = p
            .in_hand
            .iter()
            .find(|(o, held)| **held == Held::Parked && **o < offset)
            .map_or(offset, |(o, _)| *o);
        p.epoch = epoch;
        p.rewinding = true;
        p.in_hand.retain(|o, _| *o < offset);
        p.in_hand.insert(offset, Held::Awaited);
        if failed {
            *p.failures.entry(offset).or_default() += 1;
        }
        // An earlier rewind of the partition to a later offset is superseded by this one.
        state.rewinds.retain(|r| r.partition != partition);
        state.rewinds.push(Rewind {
            partition,
            offset,
            resume_at: Instant::now() + delay,
        });
        drop(state);
        self.settled.notify_all();
    }

    /// The rewinds asked for since the last call, for the poll thread to carry out.
    pub(crate) fn take_rewinds(&self) -> Vec<Rewind> {
        std::mem::take(&mut self.lock().rewinds)
    }

    /// The poll thread has sought `partition` back: records polled from now on are current.
    pub(crate) fn rewound(&self, partition: i32) {
        if let Some(p) = self.lock().partitions.get_mut(&partition) {
            p.rewinding = false;
        }
    }

    /// The offsets that moved since the last call, to commit.
    pub(crate) fn to_commit(&self) -> Vec<(i32, i64)> {
        let mut state = self.lock();
        state
            .partitions
            .iter_mut()
            .filter(|(_, p)| p.dirty)
            .filter_map(|(partition, p)| {
                p.dirty = false;
                Some((*partition, p.next_commit?))
            })
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn handed(partitions: &Partitions, partition: i32, offsets: std::ops::Range<i64>) -> u64 {
        let epoch = partitions.epoch_for_poll(partition).unwrap();
        for offset in offsets {
            partitions.hand_out(partition, offset, epoch).unwrap();
        }
        epoch
    }

    #[test]
    fn the_commit_moves_only_past_a_prefix_of_settled_records() {
        let partitions = Partitions::default();
        partitions.assigned([0]);
        handed(&partitions, 0, 10..13);
        partitions.settle(0, 11);
        assert_eq!(partitions.to_commit(), vec![]);
        partitions.settle(0, 10);
        assert_eq!(partitions.to_commit(), vec![(0, 12)]);
        assert_eq!(partitions.to_commit(), vec![], "committed once");
        partitions.settle(0, 12);
        assert_eq!(partitions.to_commit(), vec![(0, 13)]);
    }

    #[test]
    fn a_rewind_withdraws_the_later_records_and_counts_the_failure() {
        let partitions = Partitions::default();
        partitions.assigned([0]);
        let epoch = handed(&partitions, 0, 0..3);
        partitions.settle(0, 0);
        partitions.rewind(0, 1, epoch, Duration::ZERO, true);
        assert!(partitions.withdrawn(0, epoch));
        // The record after it fails too, run before it knew: the rewind stays at the first.
        partitions.rewind(0, 2, epoch, Duration::ZERO, true);
        assert_eq!(
            partitions.epoch_for_poll(0),
            None,
            "stale until the seek is done"
        );
        let rewinds = partitions.take_rewinds();
        assert_eq!((rewinds[0].partition, rewinds[0].offset), (0, 1));
        partitions.rewound(0);
        let epoch = partitions.epoch_for_poll(0).unwrap();
        assert_eq!(
            partitions.hand_out(0, 1, epoch),
            Some(1),
            "one failure before"
        );
        partitions.settle(0, 1);
        assert_eq!(partitions.to_commit(), vec![(0, 2)]);
    }

    #[test]
    fn nothing_past_a_handed_back_record_is_committed_until_it_is_done() {
        let partitions = Partitions::default();
        partitions.assigned([0]);
        let epoch = handed(&partitions, 0, 0..3);
        partitions.settle(0, 0);
        partitions.rewind(0, 1, epoch, Duration::ZERO, true);
        partitions.rewound(0);
        // As if the seek had failed: the record after the handed-back one comes first.
        let epoch = partitions.epoch_for_poll(0).unwrap();
        partitions.hand_out(0, 2, epoch).unwrap();
        partitions.settle(0, 2);
        assert_eq!(partitions.to_commit(), vec![(0, 1)]);
        partitions.hand_out(0, 1, epoch).unwrap();
        partitions.settle(0, 1);
        assert_eq!(partitions.to_commit(), vec![(0, 3)]);
    }

    #[test]
    fn a_parked_record_holds_the_commit_but_not_its_partition() {
        let partitions = Partitions::default();
        partitions.assigned([0]);
        let epoch = handed(&partitions, 0, 0..3);
        assert!(partitions.park(0, 0, epoch));
        assert!(
            !partitions.withdrawn(0, epoch),
            "the records after it stay in hand"
        );
        partitions.settle(0, 1);
        partitions.settle(0, 2);
        assert_eq!(
            partitions.to_commit(),
            vec![],
            "nothing past a parked record"
        );
        assert_eq!(
            partitions.hand_out(0, 0, epoch),
            Some(1),
            "one failure before"
        );
        partitions.settle(0, 0);
        assert_eq!(partitions.to_commit(), vec![(0, 3)]);
    }

    #[test]
    fn a_rewind_past_a_parked_record_reads_the_partition_again_from_it() {
        let partitions = Partitions::default();
        partitions.assigned([0]);
        let epoch = handed(&partitions, 0, 0..4);
        assert!(partitions.park(0, 1, epoch));
        partitions.settle(0, 0);
        // A later record let go unsettled (dropped in hand): read again at once.
        partitions.rewind(0, 3, epoch, Duration::ZERO, false);
        let rewinds = partitions.take_rewinds();
        assert_eq!(
            (rewinds[0].partition, rewinds[0].offset),
            (0, 1),
            "from the parked record, whose copy in memory went stale"
        );
        partitions.rewound(0);
        let epoch = partitions.epoch_for_poll(0).unwrap();
        assert_eq!(
            partitions.hand_out(0, 1, epoch),
            Some(1),
            "its failure still counted"
        );
        for offset in 2..4 {
            partitions.hand_out(0, offset, epoch).unwrap();
        }
        for offset in 1..4 {
            partitions.settle(0, offset);
        }
        assert_eq!(
            partitions.to_commit(),
            vec![(0, 4)],
            "nothing holds the commit back"
        );
    }

    #[test]
    fn a_revocation_waits_for_the_records_in_hand_and_returns_their_offsets() {
        let partitions = std::sync::Arc::new(Partitions::default());
        partitions.assigned([0, 1]);
        let stale = handed(&partitions, 0, 0..2);
        let settler = {
            let partitions = partitions.clone();
            std::thread::spawn(move || {
                std::thread::sleep(Duration::from_millis(100));
                partitions.settle(0, 0);
                partitions.settle(0, 1);
            })
        };
        let offsets = partitions.revoked(&[0], Duration::from_secs(10));
        settler.join().unwrap();
        assert_eq!(offsets, vec![(0, 2)]);
        assert!(partitions.withdrawn(0, stale));
        assert!(partitions.epoch_for_poll(1).is_some(), "partition 1 stays");
    }
}
