//! The relay's lease: the row every relay of a table competes for, with its fencing token, and
//! the lease as the relay holding it sees it on its own clock.

use std::ops::{Add, Sub};
use std::time::Duration;

/// The lease's row. Times are milliseconds on the database's clock; a released lease ended at
/// `i64::MIN` (PostgreSQL's `-infinity`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct RelayLeaseRow {
    /// The last token granted; each take draws the next.
    pub token: i64,
    /// When the holder's lease ends.
    pub lease_until: i64,
}

impl RelayLeaseRow {
    /// A take at `now` for `lease_ms`: only once the last holder's lease has ended. The new
    /// token when taken.
    pub fn take(&mut self, now: i64, lease_ms: i64) -> Option<i64> {
        if self.lease_until >= now {
            return None;
        }
        self.token += 1;
        self.lease_until = now.saturating_add(lease_ms);
        Some(self.token)
    }

    /// A renewal at `now` by the holder of `token`, which every stamp and burial makes first on
    /// the same transaction: while the token is the last granted and the holder has not let the
    /// lease go. A lease that ran out with nobody taking it is renewed too (a holder's renewal
    /// came late on a busy machine): no other relay can have published under it, since a take
    /// draws a new token, and a take that races the renewal finds the lease running again.
    /// `false`: another relay took the lease (or it was released), and the stamp is lost with
    /// it.
    pub fn renew(&mut self, token: i64, now: i64, lease_ms: i64) -> bool {
        if self.token != token || self.lease_until == i64::MIN {
            return false;
        }
        self.lease_until = now.saturating_add(lease_ms);
        true
    }

    /// The holder of `token` lets the lease go at once (a relay that stops).
    pub fn release(&mut self, token: i64) {
        if self.token == token {
            self.lease_until = i64::MIN;
        }
    }
}

/// A lease a relay holds, on the relay's own clock `T` (an `Instant` in the relay; ticks in the
/// model). The relay stops publishing a fifth of the lease before the database would let
/// another relay in, and its token fences its stamps.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct HeldLease<T> {
    /// The token the database granted.
    pub token: i64,
    length: Duration,
    usable_until: T,
    renewed_at: T,
}

impl<T> HeldLease<T>
where
    T: Copy + Ord + Add<Duration, Output = T> + Sub<T, Output = Duration>,
{
    /// A lease of `length` granted with `token` to a request sent at `asked_at`.
    pub fn taken(token: i64, length: Duration, asked_at: T) -> Self {
        let mut lease = Self {
            token,
            length,
            usable_until: asked_at,
            renewed_at: asked_at,
        };
        lease.renewed(asked_at);
        lease
    }

    /// Records a renewal sent at `asked_at`: the database counts from when it ran the
    /// statement, which is later, so counting from the request is on the safe side.
    pub fn renewed(&mut self, asked_at: T) {
        self.renewed_at = asked_at;
        self.usable_until = asked_at + self.length.mul_f64(0.8);
    }

    /// Whether the relay may still publish under the lease at `now`.
    pub fn usable(&self, now: T) -> bool {
        now < self.usable_until
    }

    /// Whether an idle relay should renew at `now`: a third of the lease has gone by.
    pub fn due(&self, now: T) -> bool {
        now - self.renewed_at >= self.length / 3
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Instant;

    #[test]
    fn a_lease_stops_publishing_before_the_database_lets_another_relay_in() {
        let now = Instant::now();
        let lease = HeldLease::taken(7, Duration::from_secs(1), now);
        let late = now + Duration::from_millis(850);
        assert!(
            !lease.usable(late),
            "850 ms into a 1 s lease is past its usable 800 ms"
        );
        assert!(lease.due(late));
        assert!(lease.usable(now) && !lease.due(now));
    }

    #[test]
    fn a_take_waits_for_the_lease_and_a_renewal_needs_the_token() {
        let mut row = RelayLeaseRow {
            token: 0,
            lease_until: i64::MIN,
        };
        assert_eq!(row.take(0, 10), Some(1));
        assert_eq!(row.take(10, 10), None, "the lease runs to 10 inclusive");
        assert!(row.renew(1, 10, 10));
        assert!(!row.renew(0, 11, 10), "a stale token");
        assert!(row.renew(1, 25, 10), "ran out at 20, but nobody took it");
        assert_eq!(row.take(36, 10), Some(2));
        assert!(!row.renew(1, 36, 10), "taken over");
        row.release(1);
        assert_eq!(row.lease_until, 46, "a stale release lets nothing go");
        row.release(2);
        assert!(!row.renew(2, 37, 10), "let go");
        assert_eq!(row.take(37, 10), Some(3));
    }
}
