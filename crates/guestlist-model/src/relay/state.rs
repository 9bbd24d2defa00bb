//! The relay model's state: the rows and the relays as they stand, and the steps between them.

use guestlist_core::protocol::{HeldLease, RelayLeaseRow, SettledRow};

use crate::tick::Tick;

/// A row as the relay reads it.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Pending {
    /// Its id (the message's index).
    pub id: i64,
    /// Its ordering key.
    pub key: String,
}

impl SettledRow for Pending {
    fn id(&self) -> i64 {
        self.id
    }

    fn ordering_key(&self) -> Option<&str> {
        Some(&self.key)
    }
}

/// What the broker answered for one message.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Outcome {
    /// Confirmed.
    Confirmed,
    /// No confirmation: the connection was cut or the confirmation lost.
    Silent,
}

/// A relay.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum RelayProc {
    /// Without the lease.
    Standby,
    /// Holding a lease, with the batch it read and what the broker said so far.
    Holding {
        /// The lease on the relay's clock.
        lease: HeldLease<Tick>,
        /// The batch read.
        batch: Vec<Pending>,
        /// Outcomes of the batch's first messages.
        outcomes: Vec<Outcome>,
    },
}

/// The whole system.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct RelayState {
    /// The database's clock (and every relay's).
    pub now: i64,
    /// The lease's row.
    pub lease: RelayLeaseRow,
    /// Per message: committed.
    pub committed: Vec<bool>,
    /// Per message: stamped published.
    pub stamped: Vec<bool>,
    /// The messages as the broker first received them, in order (repeats left out: a consumer's
    /// inbox drops them).
    pub broker: Vec<u8>,
    /// Every relay.
    pub relays: Vec<RelayProc>,
    /// Crashes so far.
    pub crashes: u8,
    /// Losses so far.
    pub losses: u8,
    /// Releases so far.
    pub releases: u8,
}

/// One step.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum RelayAction {
    /// A writer commits message `m` (a key's messages commit in seq order: the key's row lock).
    Commit(usize),
    /// Relay `r` takes the lease.
    Take(usize),
    /// Relay `r` reads the oldest pending rows.
    Read(usize),
    /// Relay `r` publishes its batch's next message, and the broker confirms it.
    Publish(usize),
    /// Relay `r` publishes its next message; it arrives, and the confirmation is lost.
    PublishUnconfirmed(usize),
    /// Relay `r`'s connection is cut: the rest of its batch never arrives.
    Cut(usize),
    /// Relay `r` stamps what the broker confirmed, renewing the lease first.
    Stamp(usize),
    /// Relay `r`, idle, renews its lease.
    Renew(usize),
    /// Relay `r` finds its lease no longer usable on its clock: it renews it with its token,
    /// or stands by to take it again when that renewal finds it gone.
    Expire(usize),
    /// Relay `r` gives the lease back and stands by: its batch stamped, or (stopping, its last
    /// stamp failed) published and not stamped.
    Release(usize),
    /// Relay `r` crashes (SIGKILL) and starts again, standing by.
    Crash(usize),
    /// The clock moves one tick.
    Tick,
}
