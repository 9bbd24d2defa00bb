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
use std::sync::Arc;

#[cfg(doc)]
use guestlist_core::Deferral;
use guestlist_core::{HandlerName, IdempotencyKey, MessageId};

#[cfg(feature = "reqwest")]
pub use middleware::{CarryKey, Step};

tokio::task_local! {
    static PARENT: Arc<str>;
    static STEP: Arc<str>;
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

/// Runs `work` as the named step `step` of the work in progress (a step of the inbox's
/// `process_steps`): an outbound request made inside it without a [`Step`] of its own carries
/// `step`'s key, so one call per step needs no naming. Two calls to one endpoint within a step
/// still need a `Step` each.
pub async fn scope_step<F: Future>(step: &str, work: F) -> F::Output {
    STEP.scope(Arc::from(step), work).await
}

/// The named step of the work in progress, inside [`scope_step`].
pub fn current_step() -> Option<Arc<str>> {
    STEP.try_with(Arc::clone).ok()
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

/// Says "not yet" from the work in progress, and runs work watching for it: recorded beside
/// [`Deferral`] in `guestlist-core`, named here too (a "not yet" from downstream is what
/// [`CarryKey`] records).
pub use guestlist_core::{defer, watch_deferral};
