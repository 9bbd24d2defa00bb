//! The pause between tries while something stays down or refused: doubling, up to a ceiling.

use std::time::Duration;

/// A pause that doubles after each failed try, from `first` up to `max`, and starts over once a
/// try succeeds. The relay backs off this way per failing ordering key and for an outage, the
/// consumer for an outage: 0.2 s doubling to 5 s unless set.
///
/// ```
/// use std::time::Duration;
/// use guestlist_core::Backoff;
///
/// let mut backoff = Backoff::default();
/// assert_eq!(backoff.next_pause(), Duration::from_millis(200));
/// assert_eq!(backoff.next_pause(), Duration::from_millis(400));
/// for _ in 0..10 {
///     backoff.next_pause();
/// }
/// assert_eq!(backoff.next_pause(), Duration::from_secs(5));
/// backoff.reset();
/// assert_eq!(backoff.next_pause(), Duration::from_millis(200));
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Backoff {
    first: Duration,
    max: Duration,
    next: Duration,
    tries: u32,
}

impl Default for Backoff {
    fn default() -> Self {
        Self::new(Self::DEFAULT_FIRST, Self::DEFAULT_MAX)
    }
}

impl Backoff {
    /// The first pause unless set.
    pub const DEFAULT_FIRST: Duration = Duration::from_millis(200);
    /// The longest pause unless set.
    pub const DEFAULT_MAX: Duration = Duration::from_secs(5);

    /// Pauses from `first` (at least 1 ms), doubling, up to `max` (at least `first`).
    pub fn new(first: Duration, max: Duration) -> Self {
        let first = first.max(Duration::from_millis(1));
        Self {
            first,
            max: max.max(first),
            next: first,
            tries: 0,
        }
    }

    /// The pause to wait after a failed try; the one after it is twice as long, up to the
    /// ceiling.
    pub fn next_pause(&mut self) -> Duration {
        let now = self.next;
        self.next = (now * 2).min(self.max);
        self.tries += 1;
        now
    }

    /// Failed tries since the last success.
    pub fn tries(&self) -> u32 {
        self.tries
    }

    /// Starts over after a success: the next pause is the first again.
    pub fn reset(&mut self) {
        self.next = self.first;
        self.tries = 0;
    }
}
