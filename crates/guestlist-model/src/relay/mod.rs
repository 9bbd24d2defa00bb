//! The relay's protocol: two relays competing for one table's lease while writers commit
//! messages on two ordering keys, relays crash and stall, and the broker's connection is cut
//! mid-batch or loses confirmations.
//!
//! Each relay runs the rounds of `Relay`, one statement or one publish a step: take the lease
//! ([`RelayLeaseRow::take`]); read the oldest pending rows while its lease is usable on its own
//! clock ([`HeldLease::usable`]); publish them one by one (a stall may fall between any two
//! steps); sort the outcomes ([`Settled::sort`], the relay's own function); stamp the confirmed
//! rows on a transaction that renews the lease first ([`RelayLeaseRow::renew`]), or stand by
//! when that renewal finds the lease gone; renew when idle ([`HeldLease::due`]), and renew a
//! lease no longer usable on its clock before standing by; give the lease back
//! ([`RelayLeaseRow::release`]: a relay that stops on SIGTERM, or that holds more than its
//! share of the shards) once its batch is stamped, or, stopping, after its last stamp failed,
//! so that another takes it at once.
//!
//! One lease is one shard: a key's rows all fall in one shard, shards share nothing, and a
//! shard's hand-over is the release and the take modelled here.
//!
//! Left out: the relay reads its next batch while the last one's stamp commits (that read
//! leaves out the rows being stamped, so the order of steps is the same), the broker refusing
//! a message (the held keys and dead letters), and which shards a relay asks for (its share:
//! [`guestlist_core::protocol::ShardMoves`], tested on its own).

use guestlist_core::protocol::{HeldLease, RelayLeaseRow, Settled};
use guestlist_core::{Confirmed, PublishError};
use stateright::{Model, Property};

use crate::tick::{Tick, ticks};

mod state;

pub use state::{Outcome, Pending, RelayAction, RelayProc, RelayState};

/// What the broker said of one message: its confirmation or refusal, or nothing in time.
pub type Said = Option<Result<Confirmed, PublishError>>;

/// The moves the model runs: the protocol's, or a broken one.
#[derive(Clone, Copy)]
pub struct RelayMoves {
    /// The lease's take.
    pub take: fn(&mut RelayLeaseRow, i64, i64) -> Option<i64>,
    /// The lease's renewal, on the stamp's transaction.
    pub renew: fn(&mut RelayLeaseRow, i64, i64, i64) -> bool,
    /// Which rows of a published batch to stamp.
    pub stamp: fn(&[Pending], Vec<Said>) -> Vec<i64>,
    /// The holder of a token gives the lease back.
    pub release: fn(&mut RelayLeaseRow, i64),
}

impl RelayMoves {
    /// The moves the relay makes.
    pub const PROTOCOL: RelayMoves = RelayMoves {
        take: RelayLeaseRow::take,
        renew: RelayLeaseRow::renew,
        stamp: |rows, outcomes| Settled::sort(rows, outcomes).stamp,
        release: RelayLeaseRow::release,
    };
}

/// The relay model: messages `(ordering key, seq)` in id order, and two relays.
#[derive(Clone)]
pub struct RelayModel {
    /// Each message's key and seq; its index is its row id.
    pub messages: Vec<(u8, u8)>,
    /// How many relays run.
    pub relays: usize,
    /// The lease, in ticks.
    pub lease: i64,
    /// Rows a read takes at most.
    pub batch: usize,
    /// Relay crashes allowed in a run, in all.
    pub crashes: u8,
    /// Cut connections and lost confirmations allowed in a run, in all.
    pub losses: u8,
    /// Leases given back in a run, in all.
    pub releases: u8,
    /// Faults stop here; then the clock moves only while nothing else can.
    pub horizon: i64,
    /// Leases granted in a run, at most (a broken take could hand them out forever).
    pub takes: i64,
    /// The moves.
    pub moves: RelayMoves,
}

impl RelayModel {
    /// Three messages on two keys, two relays.
    pub fn new() -> Self {
        Self {
            messages: vec![(0, 1), (1, 1), (0, 2)],
            relays: 2,
            lease: 5,
            batch: 2,
            crashes: 1,
            losses: 1,
            releases: 1,
            horizon: 8,
            takes: 6,
            moves: RelayMoves::PROTOCOL,
        }
    }

    fn pending(&self, state: &RelayState) -> Vec<Pending> {
        (0..self.messages.len())
            .filter(|&m| state.committed[m] && !state.stamped[m])
            .take(self.batch)
            .map(|m| Pending {
                id: m as i64,
                key: format!("k{}", self.messages[m].0),
            })
            .collect()
    }

    fn done(&self, state: &RelayState) -> bool {
        state
            .committed
            .iter()
            .zip(&state.stamped)
            .all(|(c, s)| !c || *s)
    }

    /// The steps other than the clock's.
    fn moves_of(&self, state: &RelayState, actions: &mut Vec<RelayAction>) {
        let faults = state.now < self.horizon;
        for m in 0..self.messages.len() {
            let (key, seq) = self.messages[m];
            let earlier_done = self.messages[..m]
                .iter()
                .zip(&state.committed)
                .all(|(&(k, s), &c)| k != key || s > seq || c);
            if !state.committed[m] && earlier_done {
                actions.push(RelayAction::Commit(m));
            }
        }
        let now = Tick(state.now);
        for (r, relay) in state.relays.iter().enumerate() {
            match relay {
                RelayProc::Standby => {
                    // A relay standing by asks every round; the take says whether it got it.
                    if self.next_state(state, RelayAction::Take(r)).is_some() {
                        actions.push(RelayAction::Take(r));
                    }
                }
                RelayProc::Holding {
                    lease,
                    batch,
                    outcomes,
                } => {
                    if batch.is_empty() {
                        if faults && state.releases < self.releases {
                            actions.push(RelayAction::Release(r));
                        }
                        if !lease.usable(now) {
                            actions.push(RelayAction::Expire(r));
                        } else if !self.pending(state).is_empty() {
                            actions.push(RelayAction::Read(r));
                        } else if lease.due(now) {
                            actions.push(RelayAction::Renew(r));
                        }
                    } else if outcomes.len() < batch.len() {
                        actions.push(RelayAction::Publish(r));
                        if faults && state.losses < self.losses {
                            actions.push(RelayAction::PublishUnconfirmed(r));
                            actions.push(RelayAction::Cut(r));
                        }
                    } else {
                        actions.push(RelayAction::Stamp(r));
                        // Stopping, the relay whose last stamp failed lets the lease go anyway:
                        // the batch is published again by whoever takes it.
                        if faults && state.releases < self.releases {
                            actions.push(RelayAction::Release(r));
                        }
                    }
                }
            }
            if faults && state.crashes < self.crashes {
                actions.push(RelayAction::Crash(r));
            }
        }
    }
}

impl Default for RelayModel {
    fn default() -> Self {
        Self::new()
    }
}

impl Model for RelayModel {
    type State = RelayState;
    type Action = RelayAction;

    fn init_states(&self) -> Vec<RelayState> {
        let n = self.messages.len();
        vec![RelayState {
            now: 0,
            lease: RelayLeaseRow {
                token: 0,
                lease_until: -1,
            },
            committed: vec![false; n],
            stamped: vec![false; n],
            broker: Vec::new(),
            relays: vec![RelayProc::Standby; self.relays],
            crashes: 0,
            losses: 0,
            releases: 0,
        }]
    }

    fn actions(&self, state: &RelayState, actions: &mut Vec<RelayAction>) {
        self.moves_of(state, actions);
        // Before the horizon the clock runs freely; past it, only while work waits and nothing
        // else can move (a lease to run out), so that every run ends.
        if state.now < self.horizon || (actions.is_empty() && !self.done(state)) {
            actions.push(RelayAction::Tick);
        }
    }

    fn next_state(&self, last: &RelayState, action: RelayAction) -> Option<RelayState> {
        let mut next = last.clone();
        let now = next.now;
        let lease_len = ticks(self.lease);
        match action {
            RelayAction::Tick => next.now += 1,
            RelayAction::Commit(m) => next.committed[m] = true,
            RelayAction::Take(r) => {
                let token = (self.moves.take)(&mut next.lease, now, self.lease)?;
                next.relays[r] = RelayProc::Holding {
                    lease: HeldLease::taken(token, lease_len, Tick(now)),
                    batch: Vec::new(),
                    outcomes: Vec::new(),
                };
            }
            RelayAction::Read(r) => {
                let rows = self.pending(&next);
                let RelayProc::Holding { batch, .. } = &mut next.relays[r] else {
                    return None;
                };
                *batch = rows;
            }
            RelayAction::Publish(r) | RelayAction::PublishUnconfirmed(r) | RelayAction::Cut(r) => {
                let RelayProc::Holding {
                    batch, outcomes, ..
                } = &mut next.relays[r]
                else {
                    return None;
                };
                let message = batch[outcomes.len()].id as u8;
                match action {
                    RelayAction::Cut(_) => {
                        // Nothing more of the batch arrives, and nothing is confirmed.
                        outcomes.resize(batch.len(), Outcome::Silent);
                        next.losses += 1;
                    }
                    RelayAction::PublishUnconfirmed(_) => {
                        outcomes.push(Outcome::Silent);
                        next.losses += 1;
                        if !next.broker.contains(&message) {
                            next.broker.push(message);
                        }
                    }
                    _ => {
                        outcomes.push(Outcome::Confirmed);
                        if !next.broker.contains(&message) {
                            next.broker.push(message);
                        }
                    }
                }
            }
            RelayAction::Stamp(r) => {
                let RelayProc::Holding {
                    lease,
                    batch,
                    outcomes,
                } = &mut next.relays[r]
                else {
                    return None;
                };
                let said = outcomes
                    .iter()
                    .map(|outcome| match outcome {
                        Outcome::Confirmed => Some(Ok(Confirmed::New)),
                        Outcome::Silent => None,
                    })
                    .collect();
                let stamp = (self.moves.stamp)(batch, said);
                if (self.moves.renew)(&mut next.lease, lease.token, now, self.lease) {
                    lease.renewed(Tick(now));
                    batch.clear();
                    outcomes.clear();
                    for id in stamp {
                        next.stamped[id as usize] = true;
                    }
                } else {
                    next.relays[r] = RelayProc::Standby;
                }
            }
            // The same renewal with the relay's token: they differ in when each is enabled
            // (idle and due, or no longer usable on the relay's clock).
            RelayAction::Renew(r) | RelayAction::Expire(r) => {
                let RelayProc::Holding { lease, .. } = &mut next.relays[r] else {
                    return None;
                };
                if (self.moves.renew)(&mut next.lease, lease.token, now, self.lease) {
                    lease.renewed(Tick(now));
                } else {
                    next.relays[r] = RelayProc::Standby;
                }
            }
            RelayAction::Release(r) => {
                let RelayProc::Holding { lease, .. } = &next.relays[r] else {
                    return None;
                };
                (self.moves.release)(&mut next.lease, lease.token);
                next.releases += 1;
                next.relays[r] = RelayProc::Standby;
            }
            RelayAction::Crash(r) => {
                next.crashes += 1;
                next.relays[r] = RelayProc::Standby;
            }
        }
        Some(next)
    }

    fn within_boundary(&self, state: &RelayState) -> bool {
        state.lease.token <= self.takes
    }

    fn properties(&self) -> Vec<Property<Self>> {
        vec![
            Property::always(
                "a row is stamped only once the broker has it",
                |_: &RelayModel, state: &RelayState| {
                    state
                        .stamped
                        .iter()
                        .enumerate()
                        .all(|(m, stamped)| !stamped || state.broker.contains(&(m as u8)))
                },
            ),
            Property::always(
                "each key's messages reach the broker in commit order",
                |model: &RelayModel, state: &RelayState| {
                    let seqs = |key: u8| {
                        state
                            .broker
                            .iter()
                            .map(|&m| model.messages[m as usize])
                            .filter(move |&(k, _)| k == key)
                            .map(|(_, seq)| seq)
                    };
                    model.messages.iter().all(|&(key, _)| {
                        let mut expected = 1;
                        seqs(key).all(|seq| {
                            let in_order = seq == expected;
                            expected += 1;
                            in_order
                        })
                    })
                },
            ),
            Property::always(
                "no two relays may publish at once",
                |_: &RelayModel, state: &RelayState| {
                    let now = Tick(state.now);
                    let usable = state.relays.iter().filter(|relay| {
                        matches!(relay, RelayProc::Holding { lease, .. } if lease.usable(now))
                    });
                    usable.count() <= 1
                },
            ),
            Property::eventually(
                "every committed message is published and stamped",
                |model: &RelayModel, state: &RelayState| {
                    state.committed.iter().all(|c| *c)
                        && model.done(state)
                        && state.broker.len() == model.messages.len()
                },
            ),
        ]
    }
}
