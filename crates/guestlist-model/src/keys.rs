//! The idempotency key's protocol: retries of one request and one other request under the same
//! key, claiming, taking over expired leases, completing and releasing by fencing token, while
//! attempts crash at every step and the clock runs.
//!
//! Each step is one statement of `SqlKeyStore` (the claim's read and its insert or take-over
//! are one step: the take-over's compare-and-set on the token it read makes a stale read
//! harmless), and each runs the protocol's own functions: [`settle`] on the row read, then the
//! guards of [`KeyLeaseRow`] that the statements' `WHERE` clauses carry.

use guestlist_core::protocol::{KeyLeaseRow, KeyRowView, Settlement, settle};
use stateright::{Model, Property};

/// Where the response is stored.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Mode {
    /// On the handler's transaction: its writes and the response commit together or not at all.
    Transactional,
    /// On a connection of its own, after the handler's writes committed on theirs.
    Plain,
}

/// The moves the model runs: the protocol's, or a broken one to show that the check finds it.
#[derive(Clone, Copy)]
pub struct KeyMoves {
    /// What a claim that found the row answers.
    pub settle: fn(KeyRowView, Option<()>) -> Settlement<()>,
    /// The take-over's guard.
    pub may_take_over: fn(&KeyLeaseRow, u64, i64) -> bool,
    /// The completion's guard.
    pub may_complete: fn(&KeyLeaseRow, u64) -> bool,
    /// The release's guard.
    pub may_release: fn(&KeyLeaseRow, u64) -> bool,
}

impl KeyMoves {
    /// The moves the stores make.
    pub const PROTOCOL: KeyMoves = KeyMoves {
        settle,
        may_take_over: KeyLeaseRow::may_take_over,
        may_complete: KeyLeaseRow::may_complete,
        may_release: KeyLeaseRow::may_release,
    };
}

/// The key model: `requests[c]` is the request client `c` retries (two clients with the same
/// request are one client's retries racing, as a timeout and a load balancer make them).
#[derive(Clone)]
pub struct KeyModel {
    /// Where responses are stored.
    pub mode: Mode,
    /// Each client's request.
    pub requests: Vec<u8>,
    /// The lease, in ticks.
    pub lease: i64,
    /// Crashes of attempts allowed in a run, in all.
    pub crashes: u8,
    /// Handler failures (a release) allowed in a run, in all.
    pub failures: u8,
    /// Faults stop here; then the clock moves only while every client waits on a lease.
    pub horizon: i64,
    /// The moves.
    pub moves: KeyMoves,
}

/// The key's row.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Row {
    /// The request that claimed it.
    pub request: u8,
    /// Its lease and holder.
    pub lease: KeyLeaseRow,
    /// The token of the attempt whose response is stored.
    pub answer: Option<u64>,
}

/// Work that committed: by which attempt, for which request.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Effect {
    /// The attempt's token.
    pub token: u64,
    /// The request it ran.
    pub request: u8,
}

/// A client (an attempt of its request at a time).
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum Client {
    /// About to send the request (again).
    Waiting,
    /// Its attempt holds the key: running the handler.
    Running {
        /// The attempt's fencing token.
        token: u64,
        /// When its lease ends.
        lease_until: i64,
        /// Plain mode: the handler's writes committed.
        worked: bool,
    },
    /// Answered with the response of the attempt holding this token.
    Answered(u64),
    /// Answered 422: the key is another request's.
    Mismatch,
}

/// The whole system.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct KeyState {
    /// The database's clock.
    pub now: i64,
    /// The key's row, if claimed.
    pub row: Option<Row>,
    /// The work that committed.
    pub effects: Vec<Effect>,
    /// Responses stored, in all (a ghost count: the store keeps one).
    pub stored: u8,
    /// Every client.
    pub clients: Vec<Client>,
    /// The next fencing token.
    pub next_token: u64,
    /// Crashes so far.
    pub crashes: u8,
    /// Handler failures so far.
    pub failures: u8,
}

/// One step.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum KeyAction {
    /// Client `c` sends its request: the claim.
    Send(usize),
    /// Plain mode: client `c`'s handler commits its writes.
    Work(usize),
    /// Client `c`'s attempt stores its response (with its writes, in transactional mode).
    Complete(usize),
    /// Client `c`'s handler fails: the attempt releases the key (its writes roll back).
    Release(usize),
    /// Client `c`'s attempt crashes (or stalls for good): its transaction rolls back, its lease
    /// stays until it ends, and the client sends again.
    Crash(usize),
    /// The clock moves one tick.
    Tick,
}

impl KeyModel {
    /// Two retries of request 0 and one request 1 on the same key.
    pub fn new(mode: Mode) -> Self {
        Self {
            mode,
            requests: vec![0, 0, 1],
            lease: 2,
            crashes: 2,
            failures: 1,
            horizon: 6,
            moves: KeyMoves::PROTOCOL,
        }
    }

    /// The steps other than the clock's. Crashes, stalls and failures happen before the
    /// horizon only, so that every run ends.
    fn moves_of(&self, state: &KeyState, actions: &mut Vec<KeyAction>) {
        let faults = state.now < self.horizon;
        for (c, client) in state.clients.iter().enumerate() {
            match client {
                Client::Waiting => {
                    if self.next_state(state, KeyAction::Send(c)).is_some() {
                        actions.push(KeyAction::Send(c));
                    }
                }
                Client::Running { worked, .. } => {
                    if self.mode == Mode::Plain && !worked {
                        actions.push(KeyAction::Work(c));
                    } else {
                        actions.push(KeyAction::Complete(c));
                    }
                    if faults && state.failures < self.failures && !worked {
                        actions.push(KeyAction::Release(c));
                    }
                    if faults && state.crashes < self.crashes {
                        actions.push(KeyAction::Crash(c));
                    }
                }
                Client::Answered(_) | Client::Mismatch => {}
            }
        }
    }
}

impl Model for KeyModel {
    type State = KeyState;
    type Action = KeyAction;

    fn init_states(&self) -> Vec<KeyState> {
        vec![KeyState {
            now: 0,
            row: None,
            effects: Vec::new(),
            stored: 0,
            clients: vec![Client::Waiting; self.requests.len()],
            next_token: 1,
            crashes: 0,
            failures: 0,
        }]
    }

    fn actions(&self, state: &KeyState, actions: &mut Vec<KeyAction>) {
        self.moves_of(state, actions);
        // Before the horizon the clock runs freely (an attempt may stall past its lease); past
        // it, only while every client waits on a lease, so that every run ends.
        let waiting = state.clients.contains(&Client::Waiting);
        if state.now < self.horizon || (actions.is_empty() && waiting) {
            actions.push(KeyAction::Tick);
        }
    }

    fn next_state(&self, last: &KeyState, action: KeyAction) -> Option<KeyState> {
        let mut next = last.clone();
        let now = next.now;
        match action {
            KeyAction::Tick => next.now += 1,
            KeyAction::Send(c) => {
                let request = self.requests[c];
                let Some(row) = next.row.as_mut() else {
                    // Insert-first: no row, so this claim's insert is the one that lands.
                    let token = next.next_token;
                    next.next_token += 1;
                    let lease_until = now + self.lease;
                    next.row = Some(Row {
                        request,
                        lease: KeyLeaseRow {
                            token,
                            answered: false,
                            lease_until,
                        },
                        answer: None,
                    });
                    next.clients[c] = Client::Running {
                        token,
                        lease_until,
                        worked: false,
                    };
                    return Some(next);
                };
                let view = KeyRowView {
                    same_request: row.request == request,
                    answered: row.lease.answered,
                    lease_left_ms: row.lease.lease_until - now,
                };
                match (self.moves.settle)(view, Some(())) {
                    Settlement::Mismatch => next.clients[c] = Client::Mismatch,
                    Settlement::Replay => {
                        next.clients[c] = Client::Answered(row.answer.unwrap_or(0));
                    }
                    // 409: the client sends again later; nothing changed.
                    Settlement::InFlight { .. } => return None,
                    Settlement::TakeOver(()) => {
                        let held = row.lease.token;
                        if !(self.moves.may_take_over)(&row.lease, held, now) {
                            return None;
                        }
                        let token = next.next_token;
                        next.next_token += 1;
                        let lease_until = now + self.lease;
                        row.lease.token = token;
                        row.lease.lease_until = lease_until;
                        next.clients[c] = Client::Running {
                            token,
                            lease_until,
                            worked: false,
                        };
                    }
                }
            }
            KeyAction::Work(c) => {
                let Client::Running { token, worked, .. } = &mut next.clients[c] else {
                    return None;
                };
                *worked = true;
                next.effects.push(Effect {
                    token: *token,
                    request: self.requests[c],
                });
            }
            KeyAction::Complete(c) => {
                let Client::Running { token, .. } = next.clients[c] else {
                    return None;
                };
                let row = next.row.as_mut()?;
                if (self.moves.may_complete)(&row.lease, token) {
                    row.lease.answered = true;
                    row.answer = Some(token);
                    next.stored += 1;
                    if self.mode == Mode::Transactional {
                        next.effects.push(Effect {
                            token,
                            request: self.requests[c],
                        });
                    }
                    next.clients[c] = Client::Answered(token);
                } else if self.mode == Mode::Plain {
                    // Fenced after its writes committed: the client gets the response it ran.
                    next.clients[c] = Client::Answered(token);
                } else {
                    // Fenced: its transaction rolls back; the client sends again.
                    next.clients[c] = Client::Waiting;
                }
            }
            KeyAction::Release(c) => {
                let Client::Running { token, .. } = next.clients[c] else {
                    return None;
                };
                next.failures += 1;
                if let Some(row) = &next.row
                    && (self.moves.may_release)(&row.lease, token)
                {
                    next.row = None;
                }
                next.clients[c] = Client::Waiting;
            }
            KeyAction::Crash(c) => {
                next.crashes += 1;
                next.clients[c] = Client::Waiting;
            }
        }
        Some(next)
    }

    fn properties(&self) -> Vec<Property<Self>> {
        vec![
            Property::always(
                "at most one effect per key",
                |model: &KeyModel, state: &KeyState| {
                    model.mode == Mode::Plain || state.effects.len() <= 1
                },
            ),
            Property::always(
                "no two attempts hold the key at once",
                |_: &KeyModel, state: &KeyState| {
                    let holding = state.clients.iter().filter(|client| {
                    matches!(client, Client::Running { lease_until, .. } if *lease_until > state.now)
                });
                    holding.count() <= 1
                },
            ),
            Property::always(
                "a stored answer is never overwritten",
                |_: &KeyModel, state: &KeyState| state.stored <= 1,
            ),
            Property::always(
                "a client is told done only for work that committed, of its own request",
                |model: &KeyModel, state: &KeyState| {
                    state.clients.iter().enumerate().all(|(c, client)| {
                        let Client::Answered(token) = *client else {
                            return true;
                        };
                        state.effects.iter().any(|effect| {
                            effect.token == token && effect.request == model.requests[c]
                        })
                    })
                },
            ),
            Property::eventually(
                "every client is answered",
                |_: &KeyModel, state: &KeyState| {
                    state
                        .clients
                        .iter()
                        .all(|client| matches!(client, Client::Answered(_) | Client::Mismatch))
                },
            ),
        ]
    }
}
