//! How fast the console takes sign-in attempts: a few a minute from one client, a few more
//! from all clients together, however many connections they open. A token of 16 random
//! characters or more is out of reach of guessing anyway; the limit keeps a guesser from even
//! trying fast, and every wrong token is logged with the client that sent it.

use std::net::IpAddr;
use std::num::NonZeroU32;
use std::time::Duration;

use governor::clock::{Clock, DefaultClock};
use governor::state::keyed::HashMapStateStore;
use governor::{DefaultDirectRateLimiter, Quota, RateLimiter};

/// Sign-in attempts one client may make a minute.
const PER_CLIENT: NonZeroU32 = NonZeroU32::new(5).unwrap();
/// Sign-in attempts all clients together may make a minute.
const IN_ALL: NonZeroU32 = NonZeroU32::new(20).unwrap();
/// Clients remembered before those whose attempts are long past are forgotten.
const CLIENTS: usize = 10_000;

/// The console's sign-in attempts so far.
pub(crate) struct Attempts {
    per_client: RateLimiter<IpAddr, HashMapStateStore<IpAddr>, DefaultClock>,
    in_all: DefaultDirectRateLimiter,
    clock: DefaultClock,
}

impl Attempts {
    /// No attempt yet.
    pub(crate) fn new() -> Self {
        Self {
            per_client: RateLimiter::hashmap(Quota::per_minute(PER_CLIENT)),
            in_all: RateLimiter::direct(Quota::per_minute(IN_ALL)),
            clock: DefaultClock::default(),
        }
    }

    /// Counts an attempt from `client`: `Ok` when it may be tried now, or how long until the
    /// next may (from this client, or from any where all clients together are past theirs).
    pub(crate) fn take(&self, client: IpAddr) -> Result<(), Duration> {
        if self.per_client.len() > CLIENTS {
            self.per_client.retain_recent();
        }
        let now = self.clock.now();
        self.per_client
            .check_key(&client)
            .map_err(|not_until| not_until.wait_time_from(now))?;
        self.in_all
            .check()
            .map_err(|not_until| not_until.wait_time_from(now))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn console_attempts_are_limited_per_client_and_in_all() {
        let attempts = Attempts::new();
        let client = |n: u8| IpAddr::from([127, 0, 0, n]);
        for _ in 0..PER_CLIENT.get() {
            assert_eq!(attempts.take(client(1)), Ok(()));
        }
        let wait = attempts.take(client(1)).unwrap_err();
        assert!(
            wait > Duration::from_secs(1) && wait <= Duration::from_secs(12),
            "{wait:?}"
        );
        // Three more clients take the rest of the minute's twenty; a fifth gets none.
        for n in 2..5 {
            for _ in 0..PER_CLIENT.get() {
                assert_eq!(attempts.take(client(n)), Ok(()));
            }
        }
        assert!(attempts.take(client(5)).is_err(), "past twenty in all");
    }
}
