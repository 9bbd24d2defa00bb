//! An idempotency key's row and the moves it allows: what a claim that found the row answers,
//! and the guarded writes (take over, complete, release) that a fencing token admits.

/// A key's row as a claim reads it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct KeyRowView {
    /// Whether the row's fingerprint is the request's.
    pub same_request: bool,
    /// Whether a response is stored.
    pub answered: bool,
    /// Milliseconds the lease has left on the database's clock (zero or less once expired).
    pub lease_left_ms: i64,
}

/// What a claim that found the key's row answers; a take-over carries what the claim brought
/// for it (the new lease's length, in the stores).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Settlement<L> {
    /// Another request used the key (422).
    Mismatch,
    /// The stored response is replayed.
    Replay,
    /// Another attempt holds a valid lease (409): retry after this many milliseconds.
    InFlight {
        /// When to retry, at least a second.
        retry_after_ms: u64,
    },
    /// The lease expired: take it over by compare-and-set on the token that held it.
    TakeOver(L),
}

/// What a claim that found `row` answers. `take_over` is `None` where another request holds the
/// key's lock and any take-over is its to make: an expired lease then answers "in flight".
///
/// ```
/// use guestlist_core::protocol::{KeyRowView, Settlement, settle};
///
/// let held = KeyRowView { same_request: true, answered: false, lease_left_ms: 2_500 };
/// assert_eq!(settle(held, Some(30_000)), Settlement::InFlight { retry_after_ms: 2_500 });
/// let expired = KeyRowView { lease_left_ms: -1, ..held };
/// assert_eq!(settle(expired, Some(30_000)), Settlement::TakeOver(30_000));
/// assert_eq!(settle(expired, None::<i64>), Settlement::InFlight { retry_after_ms: 1_000 });
/// let other = KeyRowView { same_request: false, ..held };
/// assert_eq!(settle(other, Some(30_000)), Settlement::Mismatch);
/// ```
pub fn settle<L>(row: KeyRowView, take_over: Option<L>) -> Settlement<L> {
    if !row.same_request {
        return Settlement::Mismatch;
    }
    if row.answered {
        return Settlement::Replay;
    }
    if row.lease_left_ms <= 0
        && let Some(lease) = take_over
    {
        return Settlement::TakeOver(lease);
    }
    Settlement::InFlight {
        retry_after_ms: row.lease_left_ms.max(1_000) as u64,
    }
}

/// The part of a key's row the guarded writes look at: who holds it, until when, and whether it
/// is answered. Times are milliseconds on the database's clock.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct KeyLeaseRow {
    /// The fencing token of the attempt holding the key.
    pub token: u64,
    /// Whether a response is stored (the lease is then over for good).
    pub answered: bool,
    /// When the lease ends.
    pub lease_until: i64,
}

impl KeyLeaseRow {
    /// A take-over by the attempt that read `held` as the row's token: only of that attempt's
    /// lease, only once it ended, never of an answered key.
    pub fn may_take_over(&self, held: u64, now: i64) -> bool {
        self.token == held && !self.answered && self.lease_until <= now
    }

    /// Storing a response by the attempt holding `token`: only while no other attempt took the
    /// key over, and only once. The lease's end does not matter: an attempt that outlived its
    /// lease and was not taken over still holds the key.
    pub fn may_complete(&self, token: u64) -> bool {
        self.token == token && !self.answered
    }

    /// Forgetting the key (a retry runs again): on the same terms as storing a response.
    pub fn may_release(&self, token: u64) -> bool {
        self.may_complete(token)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_stale_attempt_neither_completes_nor_takes_over_from_the_one_that_replaced_it() {
        let row = KeyLeaseRow {
            token: 2,
            answered: false,
            lease_until: 100,
        };
        assert!(!row.may_complete(1));
        assert!(!row.may_release(1));
        assert!(!row.may_take_over(1, 200), "it read token 1, now 2 holds");
        assert!(!row.may_take_over(2, 99), "the lease runs until 100");
        assert!(row.may_take_over(2, 100));
        let answered = KeyLeaseRow {
            answered: true,
            ..row
        };
        assert!(!answered.may_complete(2) && !answered.may_take_over(2, 500));
    }
}
