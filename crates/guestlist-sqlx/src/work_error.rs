//! The errors a unit of work may return, and how guestlist looks inside them.

use std::any::Any;
use std::error::Error as StdError;
use std::fmt;

/// An error the work given to [`Inbox::process`](crate::Inbox::process),
/// [`Inbox::process_batch`](crate::Inbox::process_batch) or
/// [`Inbox::transaction`](crate::Inbox::transaction) may return.
///
/// Implemented for [`anyhow::Error`] and for every `std::error::Error + Send + Sync + 'static`:
/// [`sqlx::Error`], guestlist's [`Error`](crate::Error), your own `thiserror` enums, `io::Error`.
/// guestlist looks through the error and every [`source`](StdError::source) in its chain (the
/// chain of contexts, for `anyhow`): when it finds a deadlock, a serialization failure or a busy
/// database there, it runs the whole transaction again instead of handing you the error.
///
/// A `Box<dyn Error + Send + Sync>` is not an error type of its own (it does not implement
/// `Error`); wrap it with `anyhow::Error::from_boxed`, or return `anyhow::Error` throughout.
/// A deadlock is found whatever wraps it: as a [`sqlx::Error`], as guestlist's
/// [`Error`](crate::Error), or as the driver's own database error, which is what the chain
/// shows where a wrapper such as `from_boxed` skips the `sqlx::Error` around it.
///
/// ```
/// # #[cfg(feature = "sqlite")] {
/// #[derive(Debug, thiserror::Error)]
/// enum PickError {
///     #[error("no such order")]
///     NoSuchOrder,
///     #[error(transparent)]
///     Database(#[from] sqlx::Error),
/// }
/// fn accepts<E: guestlist_sqlx::WorkError>() {}
/// accepts::<PickError>();
/// accepts::<anyhow::Error>();
/// accepts::<sqlx::Error>();
/// # }
/// ```
pub trait WorkError: fmt::Debug + fmt::Display + Send + Sync + 'static {
    /// Looks at the error and each of its sources in turn, and returns the first answer `look`
    /// gives, with the error itself back unchanged.
    fn find_in_chain<R>(
        self,
        look: impl FnMut(&(dyn StdError + 'static)) -> Option<R>,
    ) -> (Self, Option<R>)
    where
        Self: Sized;

    /// The error as a boxed `std::error::Error`, its chain of sources kept.
    fn into_boxed(self) -> Box<dyn StdError + Send + Sync>
    where
        Self: Sized;
}

impl<E> WorkError for E
where
    E: fmt::Debug + fmt::Display + Send + Sync + 'static,
    anyhow::Error: From<E>,
{
    fn find_in_chain<R>(
        self,
        mut look: impl FnMut(&(dyn StdError + 'static)) -> Option<R>,
    ) -> (Self, Option<R>) {
        // The common cases are looked at in place, with nothing allocated.
        if let Some(err) = as_source(&self) {
            let found = chain(err).find_map(&mut look);
            return (self, found);
        }
        // Any other `E: Error`: anyhow holds it as it is, so it can be had back by type.
        let err = anyhow::Error::from(self);
        let found = err.chain().find_map(&mut look);
        match err.downcast::<E>() {
            Ok(err) => (err, found),
            Err(_) => unreachable!("anyhow gives back the error it was made from"),
        }
    }

    fn into_boxed(self) -> Box<dyn StdError + Send + Sync> {
        // Reallocated, the first link is the error itself, so it can still be downcast.
        anyhow::Error::from(self).reallocate_into_boxed_dyn_error_without_backtrace()
    }
}

/// `err` and its sources.
fn chain<'a>(
    err: &'a (dyn StdError + 'static),
) -> impl Iterator<Item = &'a (dyn StdError + 'static)> {
    std::iter::successors(Some(err), |err: &&'a (dyn StdError + 'static)| {
        (*err).source()
    })
}

/// `true` when `err` (one link of a chain) is a database error worth running the transaction
/// again for.
pub(crate) fn is_retryable_link(err: &(dyn StdError + 'static)) -> bool {
    err.downcast_ref::<sqlx::Error>()
        .is_some_and(crate::backend::is_retryable)
        || err
            .downcast_ref::<crate::Error>()
            .is_some_and(crate::Error::is_retryable)
        // The driver's own error, where a wrapper (`anyhow::Error::from_boxed`) hid the
        // `sqlx::Error` around it and shows its source instead.
        || crate::backend::is_retryable_driver_error(err)
}

/// The work's error as the first link of its chain, where its type says how without an
/// allocation: `anyhow::Error` (whose chain of contexts starts there), sqlx's error and
/// guestlist's own. `None` for any other type.
pub(crate) fn as_source<E: 'static>(err: &E) -> Option<&(dyn StdError + 'static)> {
    let any: &dyn Any = err;
    if let Some(err) = any.downcast_ref::<anyhow::Error>() {
        let err: &(dyn StdError + Send + Sync + 'static) = err.as_ref();
        return Some(err);
    }
    if let Some(err) = any.downcast_ref::<sqlx::Error>() {
        return Some(err);
    }
    any.downcast_ref::<crate::Error>()
        .map(|err| err as &(dyn StdError + 'static))
}
