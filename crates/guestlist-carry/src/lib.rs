//! Carry the key forward.
//!
//! No transaction covers "my commit and somebody else's server". A handler that calls another
//! service (a payment provider, an email API) passes it an idempotency key derived from the work
//! it is doing, one stable key per step, so that the downstream service keeps the inbox for that
//! hop. A retry of the same work derives the same key; it never invents a fresh one.
//!
//! guestlist's runtimes (the inbox's `process`, the broker consumer, the HTTP layer) run handlers
//! inside [`scope`], with the work's identity as the parent: `handler:message id` for messages,
//! `scope:key` for HTTP requests. Inside, [`key_for`] derives a step's key, and with the `reqwest`
//! feature, [`CarryKey`] sets `Idempotency-Key` on outbound requests by itself.
//!
//! ```
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() {
//! let charge = guestlist_carry::scope("warehouse:evt_9f3k", async {
//!     guestlist_carry::key_for("charge").unwrap()
//! })
//! .await;
//! assert_eq!(charge.as_str(), "warehouse:evt_9f3k/charge");
//! assert!(guestlist_carry::key_for("charge").is_err(), "no work in progress out here");
//! # }
//! ```
//!
//! The guide tells the whole story, with each part's guarantees and failure tables: see
//! [carrying the key forward](https://github.com/guestlist-rs/guestlist/blob/main/docs/guide/src/carry.md)
//! (or build it locally with `mdbook serve docs/guide`).

#[cfg(feature = "reqwest")]
mod middleware;

use std::future::Future;
use std::sync::{Arc, Mutex};

use guestlist_core::{Deferral, HandlerName, IdempotencyKey, MessageId};

#[cfg(feature = "reqwest")]
pub use middleware::{CarryKey, Step};

tokio::task_local! {
    static PARENT: Arc<str>;
    static DEFERRED: Arc<Mutex<Option<Deferral>>>;
}

/// Runs `work` with `parent` as the identity of the work in progress.
pub async fn scope<F: Future>(parent: impl Into<Arc<str>>, work: F) -> F::Output {
    PARENT.scope(parent.into(), work).await
}

/// Runs `work` as `handler`'s handling of message `id`: the keys it carries are
/// `handler:id/step`, whichever runtime (the inbox's `process`, a broker consumer) runs it.
pub async fn scope_message<F: Future>(handler: &HandlerName, id: &MessageId, work: F) -> F::Output {
    scope(format!("{handler}:{id}"), work).await
}

/// The identity of the work in progress, if there is one.
pub fn current() -> Option<Arc<str>> {
    PARENT.try_with(Arc::clone).ok()
}

/// Why carrying a key failed, with what to do about it.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// There is no work in progress to derive a key from.
    #[error(
        "no idempotency key to carry: this runs outside a guestlist handler (inbox, consumer or \
         HTTP layer); wrap the work in guestlist::carry::scope, or pass a key yourself"
    )]
    NoKey,
}

/// The stable key of downstream step `step` of the work in progress (see
/// [`IdempotencyKey::derive`]).
pub fn key_for(step: &str) -> Result<IdempotencyKey, Error> {
    current()
        .map(|parent| IdempotencyKey::derive(&parent, step))
        .ok_or(Error::NoKey)
}

/// Records that the work in progress cannot be done yet, and returns `deferral` for the work to
/// return as (or inside) its error.
///
/// Whatever the error type the work returns (a `String`, `anyhow`, an enum of its own), the
/// runtime that watches it ([`watch_deferral`]: guestlist's broker consumer) learns of the
/// deferral, and hands the message back for [`Deferral::after`] without counting it as a
/// failure. [`CarryKey`] records one by itself when a downstream answers "not yet".
///
/// ```
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() {
/// use std::time::Duration;
/// use guestlist_core::Deferral;
///
/// let (result, deferred) = guestlist_carry::watch_deferral(async {
///     let not_yet = Deferral::new(Duration::from_secs(2), "payments is restarting");
///     Err::<(), String>(guestlist_carry::defer(not_yet).to_string())
/// })
/// .await;
/// assert!(result.is_err());
/// assert_eq!(deferred.unwrap().after(), Duration::from_secs(2));
/// # }
/// ```
pub fn defer(deferral: Deferral) -> Deferral {
    let _ = DEFERRED.try_with(|slot| {
        *slot.lock().unwrap_or_else(|poisoned| poisoned.into_inner()) = Some(deferral.clone());
    });
    deferral
}

/// Runs `work` and returns its output with the last deferral recorded inside it by [`defer`].
pub async fn watch_deferral<F: Future>(work: F) -> (F::Output, Option<Deferral>) {
    let slot = Arc::new(Mutex::new(None));
    let output = DEFERRED.scope(Arc::clone(&slot), work).await;
    let deferred = slot
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner())
        .take();
    (output, deferred)
}
