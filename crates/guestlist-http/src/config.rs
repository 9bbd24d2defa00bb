//! The layer's settings, shared by every request.

use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use guestlist_core::Scope;
use http::request::Parts;
use http::{HeaderName, Method, StatusCode, header};

use crate::attempts::Attempts;
use crate::key_source::KeySource;
use crate::replay_cache::ReplayCache;
use crate::waiting::WaitRoom;

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
    /// Keys one scope may have in flight at once (`None`: no cap).
    pub(crate) max_in_flight_per_scope: Option<u64>,
    /// Keys one scope may hold in the store, in flight or answered (`None`: no cap).
    pub(crate) max_keys_per_scope: Option<u64>,
    pub(crate) release_when: ReleaseFn,
    pub(crate) attempts: Attempts,
    /// Responses remembered in memory (off unless set).
    pub(crate) replay_cache: ReplayCache,
    /// The longest a request whose key is in flight waits for the first attempt's answer
    /// (zero: it gets 409 at once).
    pub(crate) in_flight_wait: Duration,
    /// How often a waiting request looks at the store again, for an attempt of another process.
    pub(crate) in_flight_poll: Duration,
    /// The requests waiting, and their caps.
    pub(crate) waiting: Arc<WaitRoom>,
}

/// How many requests may wait on one key, and on all keys, by default.
pub(crate) const WAITERS: (usize, usize) = (100, 1_000);

impl Default for Config {
    fn default() -> Self {
        Self {
            methods: vec![Method::POST, Method::PATCH],
            key: KeySource::default(),
            require_key: false,
            scope: Arc::new(scope_from_authorization),
            scope_hint:
                "send your credentials in one non-empty Authorization header: keys are scoped to \
                 the client that sent them"
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
            max_in_flight_per_scope: None,
            max_keys_per_scope: None,
            release_when: Arc::new(|status: StatusCode| {
                status.is_server_error() || status == StatusCode::TOO_MANY_REQUESTS
            }),
            attempts: Attempts::default(),
            replay_cache: ReplayCache::off(),
            in_flight_wait: Duration::ZERO,
            in_flight_poll: Duration::from_millis(100),
            waiting: Arc::new(WaitRoom::new(WAITERS.0, WAITERS.1)),
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
            .field("replay_cache", &self.replay_cache)
            .field("in_flight_wait", &self.in_flight_wait)
            .field("waiting", &self.waiting)
            .finish_non_exhaustive()
    }
}

/// The default scope: a hash of the `Authorization` header, so that each client's keys are its
/// own and no secret reaches the store. No header, an empty or blank one, or two of them give no
/// scope (the request is refused): every such client would otherwise share one scope.
fn scope_from_authorization(parts: &Parts) -> Option<Scope> {
    let mut values = parts.headers.get_all(header::AUTHORIZATION).iter();
    let credentials = values.next()?;
    if values.next().is_some() {
        return None; // two credentials: whose keys would these be?
    }
    scope_of_credentials(credentials.as_bytes())
}

/// The scope the layer gives a client that sends `credentials` in `Authorization`: a hash of them
/// with the scheme's case and spacing settled (`bearer  a` is `Bearer a`); `None` for blank
/// ones. Operators' tools use it to find a client's keys.
///
/// ```
/// use guestlist_http::scope_of_credentials;
/// assert_eq!(scope_of_credentials(b"bearer  a"), scope_of_credentials(b"Bearer a"));
/// assert_eq!(scope_of_credentials(b"  "), None);
/// ```
pub fn scope_of_credentials(credentials: &[u8]) -> Option<Scope> {
    canonical_credentials(credentials).map(|c| Scope::from_credentials(&c))
}

/// `Authorization` as one client sends it in any spelling: the scheme is case-insensitive (RFC
/// 9110 §11.1), so it is written `Bearer`, `Basic`, one space before the credentials. A value
/// with no space (a bare API key) is kept byte for byte; a blank one is none.
fn canonical_credentials(raw: &[u8]) -> Option<Vec<u8>> {
    let value = raw.trim_ascii();
    if value.is_empty() {
        return None;
    }
    let Some(space) = value.iter().position(|b| matches!(b, b' ' | b'\t')) else {
        return Some(value.to_vec());
    };
    let (scheme, credentials) = (&value[..space], value[space..].trim_ascii_start());
    let mut canonical = Vec::with_capacity(value.len());
    canonical.push(scheme[0].to_ascii_uppercase());
    canonical.extend(scheme[1..].iter().map(u8::to_ascii_lowercase));
    canonical.push(b' ');
    canonical.extend_from_slice(credentials);
    Some(canonical)
}

#[cfg(test)]
mod tests {
    use super::canonical_credentials;

    #[test]
    fn one_client_in_any_spelling_of_its_scheme() {
        let canonical =
            |raw: &[u8]| canonical_credentials(raw).map(|c| String::from_utf8(c).unwrap());
        for spelling in [&b"Bearer a"[..], b"bearer a", b"BEARER  a", b" Bearer\ta "] {
            assert_eq!(
                canonical(spelling).as_deref(),
                Some("Bearer a"),
                "{spelling:?}"
            );
        }
        assert_eq!(
            canonical(b"Bearer A").as_deref(),
            Some("Bearer A"),
            "credentials keep their case"
        );
        assert_eq!(
            canonical(b"sk_live_AbC").as_deref(),
            Some("sk_live_AbC"),
            "a bare key, byte for byte"
        );
        for blank in [&b""[..], b" ", b"\t \t"] {
            assert_eq!(canonical(blank), None, "{blank:?}");
        }
    }

    proptest::proptest! {
        #![proptest_config(proptest::prelude::ProptestConfig::with_cases(2_000))]

        /// No `Authorization` value makes the scope panic.
        #[test]
        fn no_value_panics(raw in proptest::collection::vec(proptest::prelude::any::<u8>(), 0..300)) {
            let _ = canonical_credentials(&raw);
        }

        /// The scheme's case and spacing never split one client into two scopes.
        #[test]
        fn the_scheme_is_case_insensitive(scheme in "[A-Za-z]{1,12}", credentials in "[!-~]{1,60}") {
            let lower = format!("{} {credentials}", scheme.to_ascii_lowercase());
            let shouted = format!(" {}  {credentials} ", scheme.to_ascii_uppercase());
            proptest::prop_assert_eq!(
                canonical_credentials(lower.as_bytes()),
                canonical_credentials(shouted.as_bytes())
            );
        }

        /// Different credentials never share a scope, with a scheme or bare.
        #[test]
        fn different_credentials_stay_apart(a in "[!-~]{1,30}", b in "[!-~]{1,30}") {
            proptest::prop_assume!(a != b);
            for (x, y) in [(a.clone(), b.clone()), (format!("Bearer {a}"), format!("Bearer {b}"))] {
                proptest::prop_assert_ne!(
                    canonical_credentials(x.as_bytes()),
                    canonical_credentials(y.as_bytes())
                );
            }
        }
    }
}
