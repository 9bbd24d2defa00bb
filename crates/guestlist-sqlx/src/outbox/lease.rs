//! The relay's lease as the relay holding it sees it: a token, and until when it may publish.

use std::time::{Duration, Instant};

/// A lease this relay holds. Its own clock stops it publishing a fifth of the lease before the
/// database would let another relay take over, and the token fences its stamps.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Lease {
    pub(crate) token: i64,
    length: Duration,
    usable_until: Instant,
    renewed_at: Instant,
}

impl Lease {
    /// A lease of `length` granted with `token` to a request sent at `asked_at`.
    pub(crate) fn taken(token: i64, length: Duration, asked_at: Instant) -> Self {
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
    pub(crate) fn renewed(&mut self, asked_at: Instant) {
        self.renewed_at = asked_at;
        self.usable_until = asked_at + self.length.mul_f64(0.8);
    }

    /// Whether this relay may still publish under the lease.
    pub(crate) fn usable(&self) -> bool {
        Instant::now() < self.usable_until
    }

    /// Whether an idle relay should renew now: a third of the lease has gone by.
    pub(crate) fn due(&self) -> bool {
        self.renewed_at.elapsed() >= self.length / 3
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_lease_stops_publishing_before_the_database_lets_another_relay_in() {
        let asked = Instant::now() - Duration::from_millis(850);
        let lease = Lease::taken(7, Duration::from_secs(1), asked);
        assert!(
            !lease.usable(),
            "850 ms into a 1 s lease is past its usable 800 ms"
        );
        assert!(lease.due());
        let fresh = Lease::taken(8, Duration::from_secs(10), Instant::now());
        assert!(fresh.usable() && !fresh.due());
    }
}
