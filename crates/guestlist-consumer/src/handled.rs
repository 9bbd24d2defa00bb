//! What a run of the consumer did, counted.

/// What a run of the consumer did, counted.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Handled {
    /// Deliveries fetched (not counting those the source took back before their batch began:
    /// a Kafka partition that moved, say).
    pub delivered: u64,
    /// Messages whose handler ran and committed.
    pub fresh: u64,
    /// Deliveries of messages already handled: acknowledged without running the handler.
    pub duplicates: u64,
    /// Handler runs that failed (the message went back with backoff, or to the dead letters).
    pub failed: u64,
    /// Handler runs that said "not yet" ([`Deferral`](guestlist_core::Deferral)): the message went back for the delay it
    /// asked, without counting as a failure.
    pub deferred: u64,
    /// Messages moved to the dead-letter place.
    pub dead_lettered: u64,
    /// Deliveries sent back to wait behind an earlier message of their key that went back
    /// itself (failed or deferred), without counting against them.
    pub held_back: u64,
    /// Retried dead letters of another handler that reached this one (on a subject or topic
    /// both read): acknowledged without running.
    pub for_other_handlers: u64,
}

impl std::ops::AddAssign for Handled {
    fn add_assign(&mut self, other: Self) {
        self.delivered += other.delivered;
        self.fresh += other.fresh;
        self.duplicates += other.duplicates;
        self.failed += other.failed;
        self.deferred += other.deferred;
        self.dead_lettered += other.dead_lettered;
        self.held_back += other.held_back;
        self.for_other_handlers += other.for_other_handlers;
    }
}
