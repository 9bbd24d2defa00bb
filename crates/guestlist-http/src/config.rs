//! The layer's settings, shared by every request.

use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use guestlist_core::Scope;
use http::request::Parts;
use http::{HeaderName, Method, StatusCode, header};

use crate::attempts::Attempts;
use crate::key_source::KeySource;

/// Chooses the scope of a request's key; `None` refuses the request (400).
pub(crate) type ScopeFn = Arc<dyn Fn(&Parts) -> Option<Scope> + Send + Sync>;

/// Decides from the handler's status whether to release the key instead of storing the response.
pub(crate) type ReleaseFn = Arc<dyn Fn(StatusCode) -> bool + Send + Sync>;

#[derive(Clone)]
pub(crate) struct Config {
    pub(crate) methods: Vec<Method>,
    pub(crate) key: KeySource,
    pub(crate) require_key: bool,
    pub(crate) scope: ScopeFn,
    pub(crate) scope_hint: std::borrow::Cow<'static, str>,
    pub(crate) fingerprint_headers: Vec<HeaderName>,
    pub(crate) lease: Duration,
    pub(crate) max_request_body: usize,
    pub(crate) max_stored_body: usize,
    pub(crate) mismatch_status: StatusCode,
    pub(crate) stored_headers: Vec<HeaderName>,
    pub(crate) release_when: ReleaseFn,
    pub(crate) attempts: Attempts,
}

impl Default for Config {
    fn default() -> Self {
        Self {
            methods: vec![Method::POST, Method::PATCH],
            key: KeySource::default(),
            require_key: false,
            scope: Arc::new(scope_from_authorization),
            scope_hint:
                "send credentials in Authorization: keys are scoped to the client that sent them"
                    .into(),
            fingerprint_headers: Vec::new(),
            lease: Duration::from_secs(30),
            max_request_body: 1024 * 1024,
            max_stored_body: 1024 * 1024,
            mismatch_status: StatusCode::UNPROCESSABLE_ENTITY,
            stored_headers: vec![
                header::CONTENT_TYPE,
                header::CONTENT_ENCODING,
                header::CONTENT_DISPOSITION,
                header::CONTENT_LANGUAGE,
                header::LOCATION,
                header::ETAG,
                header::LAST_MODIFIED,
            ],
            release_when: Arc::new(|status: StatusCode| {
                status.is_server_error() || status == StatusCode::TOO_MANY_REQUESTS
            }),
            attempts: Attempts::default(),
        }
    }
}

impl fmt::Debug for Config {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Config")
            .field("methods", &self.methods)
            .field("key", &self.key)
            .field("require_key", &self.require_key)
            .field("fingerprint_headers", &self.fingerprint_headers)
            .field("lease", &self.lease)
            .field("max_request_body", &self.max_request_body)
            .field("max_stored_body", &self.max_stored_body)
            .field("mismatch_status", &self.mismatch_status)
            .field("stored_headers", &self.stored_headers)
            .finish_non_exhaustive()
    }
}

/// The default scope: a hash of the `Authorization` header, so that each client's keys are its
/// own and no secret reaches the store.
fn scope_from_authorization(parts: &Parts) -> Option<Scope> {
    parts
        .headers
        .get(header::AUTHORIZATION)
        .map(|credentials| Scope::from_credentials(credentials.as_bytes()))
}
