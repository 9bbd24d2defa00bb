//! What a consumer makes of a message that comes back: which of its deliveries count against it
//! (not its deferrals, nor the deliveries withdrawn because of another message), when it is
//! poison, and how long a deferral may go on.

use std::time::Duration;

/// A consumer's limits on a message that does not go through.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Redelivery {
    /// Deliveries that fail (or die) before the message is poison.
    pub max_deliveries: u32,
    /// How long a message may be deferred, from its first deferral, before it is dead-lettered.
    pub max_deferral: Duration,
}

/// What becomes of a deferred message.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum AfterDeferral {
    /// Handed back, to come again after this long.
    Again(Duration),
    /// Deferred past `max_deferral`: dead-lettered.
    DeadLetter,
}

impl Redelivery {
    /// The deliveries of a message, out of `delivery_count` (this one included), that count
    /// against it: all but the `uncounted` (its deferrals and withdrawals), and at least this
    /// one. A first delivery is never looked up.
    ///
    /// ```
    /// use guestlist_core::protocol::Redelivery;
    /// assert_eq!(Redelivery::counted(7, 5), 2);
    /// assert_eq!(Redelivery::counted(3, 3), 1, "this delivery counts");
    /// ```
    pub fn counted(delivery_count: u32, uncounted: u32) -> u32 {
        if delivery_count <= 1 {
            return delivery_count;
        }
        delivery_count.saturating_sub(uncounted).max(1)
    }

    /// Whether a delivery that arrives with `delivery_count` needs its counted deliveries
    /// looked up before it runs: only past `max_deliveries` (the runs before may all have died).
    pub fn check_on_arrival(&self, delivery_count: u32) -> bool {
        delivery_count > self.max_deliveries
    }

    /// Whether a message arriving with `counted` deliveries against it is poison before it
    /// runs: every allowed run died on it. A message already handled is a duplicate instead,
    /// however often it came (the caller asks the inbox first).
    pub fn poison_on_arrival(&self, counted: u32) -> bool {
        counted > self.max_deliveries
    }

    /// Whether a run that failed, the `counted`th against its message, makes it poison.
    pub fn poison_after_failure(&self, counted: u32) -> bool {
        counted >= self.max_deliveries
    }

    /// A handler said "not yet, try again after `asked`", `age` after the message's first
    /// deferral: how long the message waits, at least 100 ms and never past `max_deferral`.
    pub fn after_deferral(&self, age: Duration, asked: Duration) -> AfterDeferral {
        if age >= self.max_deferral {
            return AfterDeferral::DeadLetter;
        }
        AfterDeferral::Again(
            asked
                .max(Duration::from_millis(100))
                .min(self.max_deferral - age),
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_deferral_waits_as_asked_within_the_limit_and_failures_count_apart() {
        let limits = Redelivery {
            max_deliveries: 3,
            max_deferral: Duration::from_secs(60),
        };
        let asked = Duration::from_secs(30);
        assert_eq!(
            limits.after_deferral(Duration::from_secs(50), asked),
            AfterDeferral::Again(Duration::from_secs(10))
        );
        assert_eq!(
            limits.after_deferral(Duration::ZERO, Duration::ZERO),
            AfterDeferral::Again(Duration::from_millis(100))
        );
        assert_eq!(
            limits.after_deferral(Duration::from_secs(60), asked),
            AfterDeferral::DeadLetter
        );
        assert!(!limits.check_on_arrival(3) && limits.check_on_arrival(4));
        assert!(!limits.poison_on_arrival(3) && limits.poison_on_arrival(4));
        assert!(!limits.poison_after_failure(2) && limits.poison_after_failure(3));
    }
}
