//! The consumer's protocol: one message on a broker that redelivers it (after a nak's delay,
//! or once its ack wait runs out), two consumers that claim it insert-first in the handler's
//! transaction, and a handler that succeeds, fails, says "not yet" or dies at every step.
//!
//! A consumer's run is one step from the claim to the broker's answer (the claim, the work
//! and the commit are one transaction; the deferral's count a statement of its own), and its
//! acknowledgement another, so that it can die between the commit and the ack. The rules are
//! the runtime's own, [`Redelivery`]: which deliveries count against the message, when it is
//! poison on arrival or after a failure, and how long a deferral waits.
//!
//! Left out: a database outage (the consumer holds its messages, counting nothing) and
//! batches.

use std::time::Duration;

use guestlist_core::protocol::{AfterDeferral, Redelivery};
use stateright::{Model, Property};

/// One tick of the consumer model: 100 ms, the shortest wait a deferral gets.
const TICK_MS: u64 = 100;

fn length(ticks: i64) -> Duration {
    Duration::from_millis(ticks.max(0) as u64 * TICK_MS)
}

fn ticks_of(length: Duration) -> i64 {
    length.as_millis().div_ceil(u128::from(TICK_MS)) as i64
}

/// The consumer model.
#[derive(Clone)]
pub struct ConsumerModel {
    /// How many consumers compete for the message.
    pub consumers: usize,
    /// The consumer's limits (`max_deferral` in whole ticks of 100 ms).
    pub limits: Redelivery,
    /// The broker's ack wait, in ticks.
    pub ack_wait: i64,
    /// Handler failures allowed in a run.
    pub failures: u8,
    /// Consumer deaths allowed in a run.
    pub crashes: u8,
    /// The handler says "not yet" only before this tick (the service it waits on comes back);
    /// faults stop here too.
    pub horizon: i64,
    /// The rule the consumer follows: the protocol's, or a broken one.
    pub moves: ConsumerMoves,
}

/// The rules the model runs: the protocol's, or broken ones.
#[derive(Clone, Copy)]
pub struct ConsumerMoves {
    /// The deliveries that count against the message.
    pub counted: fn(u32, u32) -> u32,
    /// Whether a run asks the inbox before the poison check on arrival.
    pub asks_inbox_on_arrival: bool,
}

impl ConsumerMoves {
    /// The runtime's.
    pub const PROTOCOL: ConsumerMoves = ConsumerMoves {
        counted: Redelivery::counted,
        asks_inbox_on_arrival: true,
    };
}

/// The message as the broker holds it.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Broker {
    /// Deliveries so far.
    pub deliveries: u32,
    /// Not before this tick (a nak's delay).
    pub ready_at: i64,
    /// Delivered and not yet answered: until when the broker waits for the answer.
    pub leased_until: Option<i64>,
    /// Acknowledged or dead-lettered: gone.
    pub gone: bool,
}

/// Why the message was dead-lettered.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum DeadLetter {
    /// As poison, at this tick.
    Poison,
    /// Deferred past `max_deferral`, at this tick.
    Deferred(i64),
}

/// A consumer.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Worker {
    /// Waiting for a delivery.
    Idle,
    /// Holding a delivery, its broker count.
    Holding(u32),
    /// Its run committed; the acknowledgement is still to go.
    Committed,
}

/// The whole system.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct ConsumerState {
    /// The clock.
    pub now: i64,
    /// The broker's side.
    pub broker: Broker,
    /// The inbox holds the message (its work committed).
    pub handled: bool,
    /// Work committed, in all (a ghost count: the inbox keeps one row).
    pub effects: u8,
    /// The deferrals table's row: count, and when the first was counted.
    pub deferrals: Option<(u32, i64)>,
    /// The first deferral ever counted (a ghost: the row is forgotten on a dead letter).
    pub first_deferral: Option<i64>,
    /// Dead-lettered, and why.
    pub dead: Option<DeadLetter>,
    /// Dead-lettered although the inbox held it then (a ghost).
    pub dead_while_handled: bool,
    /// Deliveries that ended without an answer from a consumer to the broker: failures, deaths,
    /// and deliveries the broker gave up waiting for (a ghost).
    pub lost_runs: u8,
    /// Every consumer.
    pub workers: Vec<Worker>,
    /// Failures so far.
    pub failures: u8,
    /// Deaths so far.
    pub crashes: u8,
}

/// What a handler run does.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Run {
    /// Its work commits.
    Succeeds,
    /// It fails.
    Fails,
    /// It says "not yet, try again in a tick".
    Defers,
}

/// One step.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ConsumerAction {
    /// Consumer `c` receives the message.
    Receive(usize),
    /// Consumer `c` runs its delivery: admit it, claim it, run the handler, answer the broker.
    Run(usize, Run),
    /// Consumer `c` acknowledges what it committed.
    Ack(usize),
    /// Consumer `c` dies (SIGKILL): its delivery goes unanswered.
    Crash(usize),
    /// The clock moves one tick.
    Tick,
}

impl ConsumerModel {
    /// Two consumers, poison after two failed runs, deferrals for at most four ticks.
    pub fn new() -> Self {
        Self {
            consumers: 2,
            limits: Redelivery {
                max_deliveries: 2,
                max_deferral: length(4),
            },
            ack_wait: 3,
            failures: 2,
            crashes: 2,
            horizon: 8,
            moves: ConsumerMoves::PROTOCOL,
        }
    }

    fn deliverable(&self, state: &ConsumerState) -> bool {
        let broker = &state.broker;
        !broker.gone
            && broker.ready_at <= state.now
            && broker.leased_until.is_none_or(|until| until <= state.now)
    }

    /// Dead-letters the message: gone from the broker, its deferrals forgotten.
    fn dead_letter(state: &mut ConsumerState, why: DeadLetter) {
        state.dead_while_handled |= state.handled;
        state.dead.get_or_insert(why);
        state.broker.gone = true;
        state.broker.leased_until = None;
        state.deferrals = None;
    }

    /// Hands the message back, to come again after `delay` ticks.
    fn nak(state: &mut ConsumerState, delay: i64) {
        state.broker.ready_at = state.now + delay;
        state.broker.leased_until = None;
    }

    fn run(&self, state: &mut ConsumerState, c: usize, count: u32, run: Run) {
        let uncounted = state.deferrals.map_or(0, |(count, _)| count);
        if self.limits.check_on_arrival(count) {
            let counted = (self.moves.counted)(count, uncounted);
            if self.limits.poison_on_arrival(counted) {
                if self.moves.asks_inbox_on_arrival && state.handled {
                    // A copy of handled work: a duplicate, acknowledged.
                    state.broker.gone = true;
                } else {
                    Self::dead_letter(state, DeadLetter::Poison);
                }
                state.workers[c] = Worker::Idle;
                return;
            }
        }
        if state.handled {
            // The claim finds the row: a duplicate, acknowledged.
            state.broker.gone = true;
            state.workers[c] = Worker::Idle;
            return;
        }
        match run {
            Run::Succeeds => {
                state.handled = true;
                state.effects += 1;
                state.deferrals = None;
                state.workers[c] = Worker::Committed;
            }
            Run::Fails => {
                state.failures += 1;
                state.lost_runs += 1;
                let counted = (self.moves.counted)(count, uncounted);
                if self.limits.poison_after_failure(counted) {
                    Self::dead_letter(state, DeadLetter::Poison);
                } else {
                    Self::nak(state, 1);
                }
                state.workers[c] = Worker::Idle;
            }
            Run::Defers => {
                let (deferred, first) = state.deferrals.unwrap_or((0, state.now));
                state.deferrals = Some((deferred + 1, first));
                state.first_deferral.get_or_insert(first);
                let age = length(state.now - first);
                match self.limits.after_deferral(age, length(1)) {
                    AfterDeferral::Again(delay) => Self::nak(state, ticks_of(delay)),
                    AfterDeferral::DeadLetter => {
                        Self::dead_letter(state, DeadLetter::Deferred(state.now));
                    }
                }
                state.workers[c] = Worker::Idle;
            }
        }
    }
}

impl Default for ConsumerModel {
    fn default() -> Self {
        Self::new()
    }
}

impl Model for ConsumerModel {
    type State = ConsumerState;
    type Action = ConsumerAction;

    fn init_states(&self) -> Vec<ConsumerState> {
        vec![ConsumerState {
            now: 0,
            broker: Broker {
                deliveries: 0,
                ready_at: 0,
                leased_until: None,
                gone: false,
            },
            handled: false,
            effects: 0,
            deferrals: None,
            first_deferral: None,
            dead: None,
            dead_while_handled: false,
            lost_runs: 0,
            workers: vec![Worker::Idle; self.consumers],
            failures: 0,
            crashes: 0,
        }]
    }

    fn actions(&self, state: &ConsumerState, actions: &mut Vec<ConsumerAction>) {
        let faults = state.now < self.horizon;
        for (c, worker) in state.workers.iter().enumerate() {
            match worker {
                Worker::Idle => {
                    if self.deliverable(state) {
                        actions.push(ConsumerAction::Receive(c));
                    }
                }
                Worker::Holding(_) => {
                    actions.push(ConsumerAction::Run(c, Run::Succeeds));
                    if faults && state.failures < self.failures {
                        actions.push(ConsumerAction::Run(c, Run::Fails));
                    }
                    if faults {
                        actions.push(ConsumerAction::Run(c, Run::Defers));
                    }
                }
                Worker::Committed => actions.push(ConsumerAction::Ack(c)),
            }
            if faults && state.crashes < self.crashes && *worker != Worker::Idle {
                actions.push(ConsumerAction::Crash(c));
            }
        }
        // Before the horizon the clock runs freely (a run may stall past the ack wait); past
        // it, only while the message waits and nothing else can move.
        if state.now < self.horizon || (actions.is_empty() && !state.broker.gone) {
            actions.push(ConsumerAction::Tick);
        }
    }

    fn next_state(&self, last: &ConsumerState, action: ConsumerAction) -> Option<ConsumerState> {
        let mut next = last.clone();
        match action {
            ConsumerAction::Tick => next.now += 1,
            ConsumerAction::Receive(c) => {
                if next.broker.leased_until.is_some() {
                    // The broker gave up waiting for the last delivery's answer.
                    next.lost_runs += 1;
                }
                next.broker.deliveries += 1;
                next.broker.leased_until = Some(next.now + self.ack_wait);
                next.workers[c] = Worker::Holding(next.broker.deliveries);
            }
            ConsumerAction::Run(c, run) => {
                let Worker::Holding(count) = next.workers[c] else {
                    return None;
                };
                self.run(&mut next, c, count, run);
            }
            ConsumerAction::Ack(c) => {
                next.broker.gone = true;
                next.broker.leased_until = None;
                next.workers[c] = Worker::Idle;
            }
            ConsumerAction::Crash(c) => {
                next.crashes += 1;
                if matches!(next.workers[c], Worker::Holding(_)) {
                    next.lost_runs += 1;
                }
                next.workers[c] = Worker::Idle;
            }
        }
        Some(next)
    }

    fn properties(&self) -> Vec<Property<Self>> {
        vec![
            Property::always(
                "at most one effect per message",
                |_, state: &ConsumerState| state.effects <= 1,
            ),
            Property::always(
                "a message handled is never dead-lettered as poison",
                |_, state: &ConsumerState| !state.dead_while_handled,
            ),
            Property::always(
                "a message is poison only after max_deliveries runs failed or died",
                |model: &ConsumerModel, state: &ConsumerState| {
                    state.dead != Some(DeadLetter::Poison)
                        || u32::from(state.lost_runs) >= model.limits.max_deliveries
                },
            ),
            Property::always(
                "a deferred message is dead-lettered only past max_deferral",
                |model: &ConsumerModel, state: &ConsumerState| match (
                    state.dead,
                    state.first_deferral,
                ) {
                    (Some(DeadLetter::Deferred(at)), Some(first)) => {
                        length(at - first) >= model.limits.max_deferral
                    }
                    (Some(DeadLetter::Deferred(_)), None) => false,
                    _ => true,
                },
            ),
            // Not a failure: what a dead letter of a run that stalled past its ack wait looks
            // like (its work committed later, and the dead letter is a copy of handled work:
            // replayed, it is a duplicate).
            Property::sometimes(
                "a stalled run commits after its message was dead-lettered",
                |_, state: &ConsumerState| state.handled && state.dead.is_some(),
            ),
            Property::eventually(
                "the message is handled or dead-lettered",
                |_, state: &ConsumerState| {
                    state.broker.gone && (state.handled || state.dead.is_some())
                },
            ),
        ]
    }
}
