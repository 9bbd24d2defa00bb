//! A message's steps (DESIGN 4d): deliveries of one message to several consumers, each run
//! claiming the message's run row (a lease and a fencing token, the key's protocol), reading the
//! journal, then running what is left of `charge` (an external call, journaled once it
//! returns), `reserve` (a database step: its write and its journal row on one transaction) and
//! the final work (committed with the inbox's claim), while runs crash and stall at every step
//! and the clock runs.
//!
//! Each step is one statement or one transaction of the store, and each runs the protocol's own
//! functions: [`settle`] on the run row read, [`step_at`] on the journal read, and the guards of
//! [`KeyLeaseRow`] that the statements' `WHERE` clauses carry. The journal's primary key
//! (message, place) is the database's, not a move: a second row at a place is always refused.

use guestlist_core::protocol::{KeyLeaseRow, KeyRowView, Settlement, StepAt, settle, step_at};
use stateright::{Model, Property};

/// The message's steps, in the order the handler asks for them; the final work comes after.
pub const STEPS: [&str; 2] = ["charge", "reserve"];

/// The moves the model runs: the protocol's, or a broken one to show that the check finds it.
#[derive(Clone, Copy)]
pub struct StepMoves {
    /// What a delivery that found the run row answers.
    pub settle: fn(KeyRowView, Option<()>) -> Settlement<()>,
    /// The take-over's guard.
    pub may_take_over: fn(&KeyLeaseRow, u64, i64) -> bool,
    /// The guard of a journal row and of the final commit: the run still holds the message.
    pub may_journal: fn(&KeyLeaseRow, u64) -> bool,
}

impl StepMoves {
    /// The moves the stores make.
    pub const PROTOCOL: StepMoves = StepMoves {
        settle,
        may_take_over: KeyLeaseRow::may_take_over,
        may_journal: KeyLeaseRow::may_complete,
    };
}

/// The steps model: `runners` consumers to which the message is delivered again and again.
#[derive(Clone)]
pub struct StepModel {
    /// Consumers the message is delivered to.
    pub runners: usize,
    /// The lease, in ticks.
    pub lease: i64,
    /// Crashes of runs allowed, in all.
    pub crashes: u8,
    /// Faults stop here; then the clock moves only while every runner waits on a lease.
    pub horizon: i64,
    /// The moves.
    pub moves: StepMoves,
}

/// A runner: a consumer with the message delivered, or waiting for the next delivery.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum Runner {
    /// Waiting for a delivery (the first, or a redelivery after a crash or a refusal).
    Waiting,
    /// Its run holds the message and is at step `place` of [`STEPS`] (past the last: the final
    /// work); `called` once the external step's call returned and is not yet journaled.
    Running {
        /// The run's fencing token.
        token: u64,
        /// The step it is at.
        place: usize,
        /// The external call returned, its result not yet journaled.
        called: bool,
    },
    /// Acknowledged: handled (by this run or another).
    Done,
}

/// The whole system.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct StepState {
    /// The database's clock.
    pub now: i64,
    /// The message's run row, once a run claimed it; `answered` once the final work committed.
    pub run: Option<KeyLeaseRow>,
    /// The journal: each finished step's name and the token of the run that journaled it.
    pub journal: Vec<(&'static str, u64)>,
    /// The runners.
    pub runners: Vec<Runner>,
    /// Calls of the external step, in all (a ghost: at least once is allowed).
    pub calls: u8,
    /// Calls of a step already journaled by a run that held the message (a ghost: never).
    pub needless_calls: u8,
    /// Journal rows written by a run that no longer held the message (a ghost: never).
    pub stale_journals: u8,
    /// The database step's writes committed (a ghost: at most one).
    pub reserved: u8,
    /// The final work committed (a ghost: at most one).
    pub finished: u8,
    /// The next fencing token.
    pub next_token: u64,
    /// Crashes so far.
    pub crashes: u8,
}

/// One step.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum StepAction {
    /// The message is delivered to runner `r`: its claim of the run row and its read of the
    /// journal.
    Deliver(usize),
    /// Runner `r` calls the external step it is at (outside any transaction).
    Call(usize),
    /// Runner `r` journals the external step's result.
    Journal(usize),
    /// Runner `r` runs the database step: its write and its journal row on one transaction.
    Database(usize),
    /// Runner `r` commits the final work with the inbox's claim, and the run is over.
    Commit(usize),
    /// Runner `r`'s process dies (or stalls for good): its transaction rolls back, its lease
    /// stays until it ends, and the message is delivered again.
    Crash(usize),
    /// The clock moves one tick.
    Tick,
}

impl StepModel {
    /// Three consumers, a lease of two ticks, three crashes, faults until tick 8.
    pub fn new() -> Self {
        Self {
            runners: 3,
            lease: 2,
            crashes: 3,
            horizon: 8,
            moves: StepMoves::PROTOCOL,
        }
    }

    /// Whether runner `token` holds the message now, on the database's terms.
    fn holds(&self, state: &StepState, token: u64) -> bool {
        state
            .run
            .as_ref()
            .is_some_and(|run| (self.moves.may_journal)(run, token))
    }

    /// Journals step `place` for `token`, if the journal has no row at that place (the primary
    /// key) and the run still holds the message (the guard); whether it landed.
    fn journal(&self, state: &mut StepState, token: u64, place: usize) -> bool {
        if state.journal.len() != place || !self.holds(state, token) {
            return false;
        }
        if state.run.as_ref().is_some_and(|run| run.token != token) {
            state.stale_journals += 1;
        }
        state.journal.push((STEPS[place], token));
        true
    }
}

impl Default for StepModel {
    fn default() -> Self {
        Self::new()
    }
}

impl Model for StepModel {
    type State = StepState;
    type Action = StepAction;

    fn init_states(&self) -> Vec<StepState> {
        vec![StepState {
            now: 0,
            run: None,
            journal: Vec::new(),
            runners: vec![Runner::Waiting; self.runners],
            calls: 0,
            needless_calls: 0,
            stale_journals: 0,
            reserved: 0,
            finished: 0,
            next_token: 1,
            crashes: 0,
        }]
    }

    fn actions(&self, state: &StepState, actions: &mut Vec<StepAction>) {
        let faults = state.now < self.horizon;
        for (r, runner) in state.runners.iter().enumerate() {
            match runner {
                Runner::Waiting => {
                    if self.next_state(state, StepAction::Deliver(r)).is_some() {
                        actions.push(StepAction::Deliver(r));
                    }
                }
                Runner::Running { place, called, .. } => {
                    actions.push(match (*place, *called) {
                        (0, false) => StepAction::Call(r),
                        (0, true) => StepAction::Journal(r),
                        (1, _) => StepAction::Database(r),
                        _ => StepAction::Commit(r),
                    });
                    if faults && state.crashes < self.crashes {
                        actions.push(StepAction::Crash(r));
                    }
                }
                Runner::Done => {}
            }
        }
        let waiting = state.runners.contains(&Runner::Waiting);
        if state.now < self.horizon || (actions.is_empty() && waiting) {
            actions.push(StepAction::Tick);
        }
    }

    fn next_state(&self, last: &StepState, action: StepAction) -> Option<StepState> {
        let mut next = last.clone();
        let now = next.now;
        match action {
            StepAction::Tick => next.now += 1,
            StepAction::Deliver(r) => {
                let token = match next.run.as_mut() {
                    None => {
                        let token = next.next_token;
                        next.run = Some(KeyLeaseRow {
                            token,
                            answered: false,
                            lease_until: now + self.lease,
                        });
                        token
                    }
                    Some(run) => {
                        let view = KeyRowView {
                            same_request: true,
                            answered: run.answered,
                            lease_left_ms: run.lease_until - now,
                        };
                        match (self.moves.settle)(view, Some(())) {
                            Settlement::Replay => {
                                next.runners[r] = Runner::Done;
                                return Some(next);
                            }
                            // "Not yet": handed back, delivered again later; nothing changed.
                            Settlement::InFlight { .. } | Settlement::Mismatch => return None,
                            Settlement::TakeOver(()) => {
                                let held = run.token;
                                if !(self.moves.may_take_over)(run, held, now) {
                                    return None;
                                }
                                let token = next.next_token;
                                run.token = token;
                                run.lease_until = now + self.lease;
                                token
                            }
                        }
                    }
                };
                next.next_token += 1;
                // The journal read: every step it holds is replayed, the run goes on after them.
                let mut place = 0;
                while place < STEPS.len() {
                    let journaled: Vec<&str> = next.journal.iter().map(|(name, _)| *name).collect();
                    match step_at(&journaled, place, STEPS[place]) {
                        StepAt::Replay => place += 1,
                        StepAt::Run => break,
                        StepAt::Changed { .. } => return None,
                    }
                }
                next.runners[r] = Runner::Running {
                    token,
                    place,
                    called: false,
                };
            }
            StepAction::Call(r) => {
                let Runner::Running { token, called, .. } = &mut next.runners[r] else {
                    return None;
                };
                *called = true;
                let token = *token;
                next.calls += 1;
                if !next.journal.is_empty() && self.holds(&next, token) {
                    next.needless_calls += 1;
                }
            }
            // An external step's journal row, or a database step's write and journal row on one
            // transaction: refused (another run holds the message, or journaled the step
            // first), the transaction rolls back and the write goes with it.
            StepAction::Journal(r) | StepAction::Database(r) => {
                let Runner::Running { token, place, .. } = next.runners[r] else {
                    return None;
                };
                if !self.journal(&mut next, token, place) {
                    next.runners[r] = Runner::Waiting;
                    return Some(next);
                }
                if matches!(action, StepAction::Database(_)) {
                    next.reserved += 1;
                }
                next.runners[r] = Runner::Running {
                    token,
                    place: place + 1,
                    called: false,
                };
            }
            StepAction::Commit(r) => {
                let Runner::Running { token, .. } = next.runners[r] else {
                    return None;
                };
                let run = next.run.as_mut()?;
                if (self.moves.may_journal)(run, token) && next.finished == 0 {
                    run.answered = true;
                    next.finished += 1;
                    next.runners[r] = Runner::Done;
                } else {
                    next.runners[r] = Runner::Waiting;
                }
            }
            StepAction::Crash(r) => {
                next.crashes += 1;
                next.runners[r] = Runner::Waiting;
            }
        }
        Some(next)
    }

    fn properties(&self) -> Vec<Property<Self>> {
        vec![
            Property::always(
                "the database step's write commits at most once",
                |_: &StepModel, state: &StepState| state.reserved <= 1,
            ),
            Property::always(
                "the final work commits at most once",
                |_: &StepModel, state: &StepState| state.finished <= 1,
            ),
            Property::always(
                "no run journals once another holds the message",
                |_: &StepModel, state: &StepState| state.stale_journals == 0,
            ),
            Property::always(
                "the journal's tokens never go back (two runs never both journal)",
                |_: &StepModel, state: &StepState| {
                    state.journal.windows(2).all(|pair| pair[0].1 <= pair[1].1)
                },
            ),
            Property::always(
                "a run that holds the message never calls a finished step",
                |_: &StepModel, state: &StepState| state.needless_calls == 0,
            ),
            Property::eventually(
                "the message is handled",
                |_: &StepModel, state: &StepState| state.finished == 1,
            ),
        ]
    }
}
