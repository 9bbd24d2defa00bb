//! What a handler learns about the key it runs under.

use guestlist_core::{Attempt, IdempotencyKey, Scope};

/// The key a request runs under, put in the request's extensions for the handler (and for
/// outbound calls that carry the key forward).
///
/// Present only when the request carried a key and is the attempt that runs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct IdempotencyContext {
    /// Whose key it is.
    pub scope: Scope,
    /// The client's key.
    pub key: IdempotencyKey,
    /// Which attempt this is; above 1 after a take-over of an expired lease.
    pub attempt: Attempt,
}

#[cfg(feature = "axum")]
impl<S: Send + Sync> axum_core::extract::OptionalFromRequestParts<S> for IdempotencyContext {
    type Rejection = std::convert::Infallible;

    async fn from_request_parts(
        parts: &mut http::request::Parts,
        _: &S,
    ) -> Result<Option<Self>, Self::Rejection> {
        Ok(parts.extensions.get::<IdempotencyContext>().cloned())
    }
}
