//! Running a transaction again after a deadlock or serialization failure.

use std::hash::{BuildHasher, RandomState};
use std::time::Duration;

/// How often and how patiently a failed transaction is run again.
#[derive(Debug, Clone, Copy)]
pub(crate) struct RetryPolicy {
    /// Attempts in all, the first included.
    pub(crate) attempts: u32,
    /// Pause before the second attempt; doubled each time, with jitter.
    pub(crate) first_pause: Duration,
}

impl Default for RetryPolicy {
    fn default() -> Self {
        Self {
            attempts: 8,
            first_pause: Duration::from_millis(5),
        }
    }
}

impl RetryPolicy {
    /// The pause before attempt `attempt + 1`, somewhere in `[p, 2p)` for
    /// `p = first_pause * 2^attempt`, so that two transactions that collided do not collide again
    /// in step.
    pub(crate) fn pause(&self, attempt: u32) -> Duration {
        let base = self.first_pause * 2u32.saturating_pow(attempt.min(10));
        // A fresh RandomState is randomly keyed: enough jitter without another dependency.
        let jitter = RandomState::new().hash_one(attempt) % 1000;
        let pause = base + base.mul_f64(jitter as f64 / 1000.0);
        pause.min(Duration::from_secs(2))
    }
}
