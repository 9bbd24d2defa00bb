//! Which [`FailureKind`] a store's or a handler's error is, read from its chain of sources.

use std::error::Error as StdError;

use guestlist_core::{Deferral, FailureKind};

/// The kind of failure `err` is, looking at it and every source in its chain: a
/// [`Deferral`] is [`NotYet`](FailureKind::NotYet); a database that cannot be reached, has
/// gone away, is out of connections or shutting down, a missing table, or a deadlock or
/// serialization failure that outlived its retries is an [`Outage`](FailureKind::Outage),
/// whatever wraps it; anything else is [`Poison`](FailureKind::Poison): the message's own.
///
/// ```
/// use guestlist_core::{Deferral, FailureKind};
/// use std::time::Duration;
///
/// let down = guestlist_sqlx::sqlx::Error::PoolTimedOut;
/// assert_eq!(guestlist_sqlx::failure_kind(&down), FailureKind::Outage);
/// let later = Deferral::new(Duration::from_secs(1), "in flight downstream");
/// assert_eq!(guestlist_sqlx::failure_kind(&later), FailureKind::NotYet);
/// let bad = std::io::Error::other("no such order");
/// assert_eq!(guestlist_sqlx::failure_kind(&bad), FailureKind::Poison);
/// ```
pub fn failure_kind(err: &(dyn StdError + 'static)) -> FailureKind {
    let mut next = Some(err);
    while let Some(link) = next {
        if let Some(kind) = link_kind(link) {
            return kind;
        }
        next = link.source();
    }
    FailureKind::Poison
}

/// The kind one link says, if it says one.
pub(crate) fn link_kind(link: &(dyn StdError + 'static)) -> Option<FailureKind> {
    if link.downcast_ref::<Deferral>().is_some() {
        return Some(FailureKind::NotYet);
    }
    if let Some(err) = link.downcast_ref::<sqlx::Error>() {
        return sqlx_kind(err);
    }
    if let Some(err) = link.downcast_ref::<crate::Error>() {
        return match err {
            crate::Error::MissingTable { .. } => Some(FailureKind::Outage),
            crate::Error::DeferredTransaction(_) => Some(FailureKind::Outage),
            crate::Error::CommitUnknown(_) => Some(FailureKind::Outage),
            crate::Error::Database(err) => sqlx_kind(err),
            crate::Error::Shared(err) => link_kind(err.as_ref()),
            // Another run of the message's steps holds it now and finishes it.
            crate::Error::RunTakenOver { .. } => Some(FailureKind::Withdrawn),
            // Another message's failure rolled the batch's shared transaction back.
            crate::Error::RolledBackWithBatch => Some(FailureKind::Withdrawn),
            _ => None,
        };
    }
    let db = crate::backend::driver_error(link)?;
    database_kind(db)
}

/// The kind of a sqlx error: the connection's failures are outages; a database's answer is
/// an outage when it says it cannot serve now, or the transaction met another.
fn sqlx_kind(err: &sqlx::Error) -> Option<FailureKind> {
    match err {
        sqlx::Error::Io(_)
        | sqlx::Error::Tls(_)
        | sqlx::Error::Protocol(_)
        | sqlx::Error::PoolTimedOut
        | sqlx::Error::PoolClosed
        | sqlx::Error::WorkerCrashed => Some(FailureKind::Outage),
        sqlx::Error::Database(db) => database_kind(db.as_ref()),
        _ => None,
    }
}

fn database_kind(db: &dyn sqlx::error::DatabaseError) -> Option<FailureKind> {
    let transient = crate::backend::is_unavailable(db) || crate::backend::is_retryable_db(db);
    transient.then_some(FailureKind::Outage)
}

impl crate::Error {
    /// Which kind of failure this is ([`failure_kind`]): an unreachable or overloaded
    /// database, a missing table, a transaction that kept meeting others are outages.
    pub fn kind(&self) -> FailureKind {
        failure_kind(self)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_dead_connection_is_an_outage_wherever_it_sits_in_the_chain() {
        let io = sqlx::Error::Io(std::io::Error::from(std::io::ErrorKind::ConnectionRefused));
        let wrapped = anyhow::Error::new(io).context("charging order 42");
        let boxed: Box<dyn StdError + Send + Sync> = wrapped.into();
        assert_eq!(failure_kind(boxed.as_ref()), FailureKind::Outage);
        let missing = crate::Error::MissingTable {
            table: "guestlist_inbox".into(),
            source: sqlx::Error::RowNotFound,
        };
        assert_eq!(missing.kind(), FailureKind::Outage);
        assert_eq!(failure_kind(&sqlx::Error::RowNotFound), FailureKind::Poison);
    }
}
