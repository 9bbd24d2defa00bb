//! What this consumer holds of each assigned partition: the records in hand, the offset it may
//! commit, and rewinds to a record handed back.
//!
//! Kafka acknowledges by offset, not by message: committing offset `n` of a partition says
//! every record below `n` is done. So the offset to commit only moves past a record once that
//! record and every one before it (among those handed out) are settled. A record handed back
//! (a failed handler) rewinds its partition to it: the records after it that were already
//! fetched are withdrawn, and the partition is read again from the record, after the delay.
//! Each partition carries an *epoch*, raised by every rewind and every revocation; a record
//! fetched under an older epoch is stale and is never handled. Each hand-out of a record gets a
//! [`Ticket`] of its own: a delivery holds its record for as long as its ticket is the one in
//! hand at that offset. A rewind withdraws only the records from its offset on; the earlier
//! ones, in other lanes of the consumer, stay theirs. While a partition is being taken away, a
//! record handed back is left to its next owner instead, and the records behind it (or behind a
//! parked one) that have not begun are let go.

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
    /// The last epoch or ticket given out: they never repeat, even across an assignment.
    last_epoch: u64,
    /// Assignments so far: each one undoes the poll thread's partition queues.
    assignments: u64,
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
    /// The partition is being taken away: a record handed back now is read again by its next
    /// owner, not here, and no record behind one handed back or parked begins here (a parked
    /// record due meanwhile may still be handed out, and settle).
    revoking: bool,
    /// Failed deliveries of records, by offset: Kafka does not count deliveries.
    failures: HashMap<i64, u32>,
}

/// One hand-out of a record: a record handed out again (read again after a rewind, or its parked
/// copy due) gets a new one, so that a delivery can tell whether the record is still its own.
pub(crate) type Ticket = u64;

/// Where a record of `in_hand` stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Held {
    /// Handed out under the ticket, not yet done.
    Out(Ticket),
    /// Done: its offset may be committed once every record before it is done.
    Settled,
    /// Handed back: the partition is read again from it (by its next owner, where it is being
    /// taken away), and nothing past it is committed until it is done.
    Awaited,
    /// Handed back while the consumer orders by key: handed out again from memory after its
    /// delay (see [`crate::parked`]), its partition going on; nothing past it is committed
    /// until it is done. Its copy in memory carries the ticket it was handed out under.
    Parked(Ticket),
}

/// A partition to read again from `offset`, once `resume_at` has come.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Rewind {
    pub(crate) partition: i32,
    pub(crate) offset: i64,
    pub(crate) resume_at: Instant,
}

impl State {
    /// A new epoch or ticket.
    fn next_ticket(&mut self) -> u64 {
        self.last_epoch += 1;
        self.last_epoch
    }

    /// Whether the record at `offset` of `partition` is out under `ticket`.
    fn holds(&self, partition: i32, offset: i64, ticket: Ticket) -> bool {
        self.partitions
            .get(&partition)
            .and_then(|p| p.in_hand.get(&offset))
            == Some(&Held::Out(ticket))
    }

    /// Whether the record at `offset` comes after one of its partition, being taken away, that
    /// was handed back or parked: that one is read again by the partition's next owner, so
    /// this one may not run here before it (nor could its offset be committed past it).
    fn behind_one_gone(&self, partition: i32, offset: i64) -> bool {
        self.partitions.get(&partition).is_some_and(|p| {
            p.revoking
                && p.in_hand
                    .range(..offset)
                    .any(|(_, held)| matches!(held, Held::Parked(_) | Held::Awaited))
        })
    }
}

impl Partitions {
    fn lock(&self) -> MutexGuard<'_, State> {
        // The state is plain bookkeeping, whole after any panic between its statements.
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Partitions given to this consumer: each starts afresh at its committed offset.
    pub(crate) fn assigned(&self, partitions: impl IntoIterator<Item = i32>) {
        let mut state = self.lock();
        state.assignments += 1;
        for partition in partitions {
            let epoch = state.next_ticket();
            state.partitions.insert(
                partition,
                Partition {
                    epoch,
                    in_hand: BTreeMap::new(),
                    next_commit: None,
                    dirty: false,
                    rewinding: false,
                    revoking: false,
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
            let epoch = state.next_ticket();
            if let Some(p) = state.partitions.get_mut(partition) {
                p.epoch = epoch;
                p.revoking = true;
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
                        .filter(|held| matches!(held, Held::Out(_)))
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

    /// How many assignments this consumer has had, and the partitions assigned now.
    pub(crate) fn assignment(&self) -> (u64, Vec<i32>) {
        let state = self.lock();
        let mut partitions: Vec<i32> = state.partitions.keys().copied().collect();
        partitions.sort_unstable();
        (state.assignments, partitions)
    }

    /// The partitions assigned to this consumer now, in order.
    pub(crate) fn assigned_now(&self) -> Vec<i32> {
        self.assignment().1
    }

    /// The epoch under which a record just polled from `partition` is handed out; `None` when
    /// it is stale (the partition is not assigned, or a rewind is pending).
    pub(crate) fn epoch_for_poll(&self, partition: i32) -> Option<u64> {
        let state = self.lock();
        let p = state.partitions.get(&partition)?;
        (!p.rewinding).then_some(p.epoch)
    }

    /// Hands out the record at `offset`, polled under `epoch`: `None` when it went stale in
    /// between. Returns how many times it failed before, and its ticket.
    pub(crate) fn hand_out(
        &self,
        partition: i32,
        offset: i64,
        epoch: u64,
    ) -> Option<(u32, Ticket)> {
        let mut state = self.lock();
        let ticket = state.next_ticket();
        let p = state.partitions.get_mut(&partition)?;
        if p.epoch != epoch {
            return None;
        }
        match p.in_hand.get(&offset) {
            None | Some(Held::Awaited) => {}
            // Held already (parked, or out): never handed out twice.
            Some(_) => return None,
        }
        p.in_hand.insert(offset, Held::Out(ticket));
        Some((p.failures.get(&offset).copied().unwrap_or(0), ticket))
    }

    /// Hands out again the record at `offset` parked under `parked`: `None` when it is no
    /// longer parked under that ticket (withdrawn by a rewind to it or before it, or its
    /// partition moved: it is read again from the broker). Returns how many times it failed
    /// before, and its new ticket.
    pub(crate) fn unpark(
        &self,
        partition: i32,
        offset: i64,
        parked: Ticket,
    ) -> Option<(u32, Ticket)> {
        let mut state = self.lock();
        let ticket = state.next_ticket();
        let p = state.partitions.get_mut(&partition)?;
        let held = p.in_hand.get_mut(&offset)?;
        if *held != Held::Parked(parked) {
            return None;
        }
        *held = Held::Out(ticket);
        Some((p.failures.get(&offset).copied().unwrap_or(0), ticket))
    }

    /// Whether the record at `offset`, handed out under `ticket`, was withdrawn since (by a
    /// rewind to it or before it, or its partition moved), or must not run here any more: its
    /// partition is being taken away, and an earlier record of it was handed back or parked.
    pub(crate) fn withdrawn(&self, partition: i32, offset: i64, ticket: Ticket) -> bool {
        let state = self.lock();
        !state.holds(partition, offset, ticket) || state.behind_one_gone(partition, offset)
    }

    /// The record at `offset`, handed out under `ticket`, is done: the offset to commit moves
    /// past it if every record before it is done too.
    pub(crate) fn settle(&self, partition: i32, offset: i64, ticket: Ticket) {
        let mut state = self.lock();
        if state.holds(partition, offset, ticket)
            && let Some(p) = state.partitions.get_mut(&partition)
        {
            p.in_hand.insert(offset, Held::Settled);
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

    /// The record at `offset`, handed out under `ticket`, is parked to be handed out again:
    /// counted as a failure, and not committed past. `false` where it was withdrawn since: it
    /// is read again anyway.
    pub(crate) fn park(&self, partition: i32, offset: i64, ticket: Ticket) -> bool {
        let mut state = self.lock();
        if !state.holds(partition, offset, ticket) {
            return false;
        }
        let Some(p) = state.partitions.get_mut(&partition) else {
            return false;
        };
        p.in_hand.insert(offset, Held::Parked(ticket));
        *p.failures.entry(offset).or_default() += 1;
        drop(state);
        self.settled.notify_all();
        true
    }

    /// Reads `partition` again from `offset` (a record handed out under `ticket`) after
    /// `delay`: the records in hand from `offset` on are withdrawn; those before it stay in
    /// hand (parked ones too). `failed` counts the delivery as a failure of the record. While
    /// the partition is being taken away, the record is only marked awaited: its next owner
    /// reads it, and the records after it still running may finish.
    ///
    /// A record withdrawn since it was handed out is read again anyway: its failure is
    /// counted, but it moves no rewind (a rewind to it would drop the earlier one, and with it
    /// the record that rewind waits for).
    pub(crate) fn rewind(
        &self,
        partition: i32,
        offset: i64,
        ticket: Ticket,
        delay: Duration,
        failed: bool,
    ) {
        let mut state = self.lock();
        let holds = state.holds(partition, offset, ticket);
        let epoch = state.next_ticket();
        let Some(p) = state.partitions.get_mut(&partition) else {
            return; // revoked meanwhile: the next owner starts from the committed offset
        };
        if failed {
            *p.failures.entry(offset).or_default() += 1;
        }
        if !holds {
            return;
        }
        if p.revoking {
            // Read again by the next owner: nothing past it is committed here, and the records
            // after it still running may finish.
            p.in_hand.insert(offset, Held::Awaited);
            drop(state);
            self.settled.notify_all();
            return;
        }
        p.epoch = epoch;
        p.rewinding = true;
        p.in_hand.retain(|o, _| *o < offset);
        p.in_hand.insert(offset, Held::Awaited);
        // An earlier rewind of the partition to a later offset is superseded by this one.
        state.rewinds.retain(|r| r.partition != partition);
        state.rewinds.push(Rewind {
            partition,
            offset,
            resume_at: Instant::now() + delay,
        });
        drop(state);
        tracing::debug!(
            partition,
            offset,
            ?delay,
            failed,
            "reading a partition again from a record"
        );
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

    /// For a debug log: each assigned partition's offset to commit, the records in hand, and
    /// the first of them (what holds the commit back) with where it stands.
    pub(crate) fn summary(&self) -> String {
        let state = self.lock();
        let mut partitions: Vec<_> = state.partitions.iter().collect();
        partitions.sort_unstable_by_key(|(partition, _)| **partition);
        partitions
            .into_iter()
            .map(|(partition, p)| {
                let first = p.in_hand.first_key_value();
                format!(
                    "{partition}: commit {:?}, {} in hand, first {:?}",
                    p.next_commit,
                    p.in_hand.len(),
                    first
                )
            })
            .collect::<Vec<_>>()
            .join("; ")
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
mod tests;
