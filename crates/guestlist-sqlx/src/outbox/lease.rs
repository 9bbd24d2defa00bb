//! The relay's lease as the relay holding it sees it: the protocol's [`HeldLease`] on the
//! process's monotonic clock.

use std::time::Instant;

use guestlist_core::protocol::HeldLease;

/// A lease this relay holds, judged on [`Instant`].
pub(crate) type Lease = HeldLease<Instant>;
