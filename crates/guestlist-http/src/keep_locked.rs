//! A handler's way to say "I cannot tell whether my work happened".

/// A response extension that keeps the request's key locked until its lease ends, instead of
/// releasing it (as a 5xx would) or storing the response.
///
/// Set it when the work may have happened but its outcome is unknown: a proxy whose upstream
/// timed out, or whose connection dropped after the request was sent. A retry then gets 409
/// until the lease ends, never a second copy of work that may still be running, and once the
/// lease ends it takes over and runs again.
///
/// ```
/// use guestlist_http::KeepLocked;
/// let mut response = http::Response::new(());
/// *response.status_mut() = http::StatusCode::GATEWAY_TIMEOUT;
/// response.extensions_mut().insert(KeepLocked);
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct KeepLocked;

/// A response extension of the layer's own extractors: release the request's key whatever the
/// status, as a 5xx would. A refusal that says nothing about the request's work (steps asked of
/// a key whose journal is another request's) must not store its answer under the key: the
/// request the journal belongs to can still come back and finish.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct ReleaseKey;
