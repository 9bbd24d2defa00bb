//! The database is down: what a consumer waits out, counting nothing against a message.

use std::sync::Arc;

use guestlist_core::FailureKind;
use guestlist_sqlx::failure_kind;

/// The database is down (unreachable, out of connections, shutting down, its table missing):
/// what the wait is for. Nothing is counted against a message for it; the deliveries not yet
/// settled are held, kept alive, and tried again.
#[derive(Debug)]
pub(crate) struct Outage(pub(crate) String);

impl Outage {
    /// The outage `err` is, if it is one; `what` says where it was met.
    pub(crate) fn of(what: &str, err: &(dyn std::error::Error + 'static)) -> Option<Self> {
        (failure_kind(err) == FailureKind::Outage).then(|| Outage(format!("{what}: {err}")))
    }
}

/// The deliveries an outage left unsettled, to hold and try again.
pub(crate) type Held<D> = (Outage, Vec<Arc<D>>);
