//! The models' clock: whole ticks of one millisecond, one clock for the database and every
//! process (a process whose clock is off by an offset judges leases the same, since a lease is
//! a length; a clock that runs at another rate is not modelled).

use std::ops::{Add, Sub};
use std::time::Duration;

/// A moment, in ticks since the model began.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Tick(pub i64);

impl Add<Duration> for Tick {
    type Output = Tick;

    fn add(self, length: Duration) -> Tick {
        // Leases of a few ticks: a fraction of one (0.8 of a lease) rounds down, which is the
        // holder's safe side.
        Tick(self.0 + length.as_millis() as i64)
    }
}

impl Sub<Tick> for Tick {
    type Output = Duration;

    fn sub(self, earlier: Tick) -> Duration {
        Duration::from_millis(self.0.saturating_sub(earlier.0).max(0) as u64)
    }
}

/// `ticks` as a lease's length.
pub fn ticks(ticks: i64) -> Duration {
    Duration::from_millis(ticks as u64)
}
