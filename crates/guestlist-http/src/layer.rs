//! The layer: the configuration, built once and shared by every request.

use std::sync::Arc;
use std::time::Duration;

use guestlist_core::{KeyStore, Scope};
use http::request::Parts;
use http::{HeaderName, Method, StatusCode};
use tower_layer::Layer;

use crate::config::Config;
use crate::key_source::KeySource;
use crate::mode::{Mode, Plain};
use crate::service::Idempotency;

/// Applies Stripe-style `Idempotency-Key` handling to a service: the first request with a key
/// runs and its response is stored; retries get that response again, byte for byte, with
/// `Idempotent-Replayed: true`.
///
/// - a retry while the first attempt runs gets **409** with `Retry-After`;
/// - the same key with another request (method, path and query, body) gets **422**;
/// - a malformed key gets **400**, and so does a missing one where [`require_key`](Self::require_key);
/// - a body over [`max_request_body`](Self::max_request_body) gets **413**;
/// - a handler answer of 5xx or 429 releases the key, so the retry runs again; one marked
///   [`KeepLocked`](crate::KeepLocked) keeps it locked until the lease ends.
///
/// Every refusal is `application/problem+json` with a `detail` that tells the client what to do.
/// Keys are scoped per client (by default a hash of `Authorization`) and never cross scopes.
///
/// [`IdempotencyLayer::new`] takes any [`KeyStore`] and stores responses on their own;
/// [`IdempotencyLayer::transactional`] stores them on the handler's own transaction, so that its
/// writes and its response commit together.
#[derive(Debug, Clone)]
pub struct IdempotencyLayer<M> {
    mode: M,
    config: Arc<Config>,
}

impl<K: KeyStore> IdempotencyLayer<Plain<K>> {
    /// Plain mode on `store`: the stored response is written after the handler, on its own.
    pub fn new(store: K) -> Self {
        Self {
            mode: Plain(store),
            config: Arc::new(Config::default()),
        }
    }
}

#[cfg(feature = "sql")]
impl<DB: guestlist_sqlx::Backend> IdempotencyLayer<crate::Transactional<DB>> {
    /// Transactional mode on a SQL key store: handlers take the request's transaction with
    /// [`IdempotentTx`](crate::IdempotentTx), and the response is stored on it before it commits.
    pub fn transactional(store: guestlist_sqlx::SqlKeyStore<DB>) -> Self {
        Self {
            mode: crate::Transactional::new(store),
            config: Arc::new(Config::default()),
        }
    }
}

#[cfg(feature = "postgres")]
impl IdempotencyLayer<crate::Transactional<sqlx::Postgres>> {
    /// Writes the claim on the handler's own transaction instead of committing it first: the
    /// claim, the handler's writes and the stored response take one commit, not two (1.07–1.31×
    /// the default's requests per second in the guide's performance chapter).
    ///
    /// A transaction-scoped advisory lock on the key stands in for the committed claim: a retry
    /// that arrives while the first attempt runs gets 409 at once. What changes:
    /// - an attempt whose process dies takes its claim with it as its writes roll back, so the
    ///   next retry runs at once rather than after the lease;
    /// - an attempt whose transaction sits idle past the lease (a stalled handler, a connection
    ///   gone silent) has its session ended by PostgreSQL (`idle_in_transaction_session_timeout`
    ///   is set to the lease for the transaction): its writes roll back, it answers 503, and the
    ///   retry after it runs. Time spent inside statements does not count towards it;
    /// - a response marked [`KeepLocked`](crate::KeepLocked) rolls the handler's writes back and
    ///   commits the claim alone, which holds the key for a lease from then (the session holds
    ///   the key's lock meanwhile, so no retry slips in; the happy path pays nothing for it);
    /// - every keyed request holds a connection from its claim to its commit, replays included
    ///   (a replay reads the stored response on that transaction and rolls it back).
    ///
    /// The lock numbers share PostgreSQL's advisory-lock space with the application's own
    /// (`pg_try_advisory_xact_lock` on a 64-bit hash of table, scope and key).
    pub fn claim_in_transaction(mut self) -> Self {
        self.mode.claim_on_tx = true;
        self
    }
}

impl<M: Mode> IdempotencyLayer<M> {
    fn config(&mut self) -> &mut Config {
        Arc::make_mut(&mut self.config)
    }

    /// The methods whose requests are keyed (default `POST` and `PATCH`); others pass through.
    pub fn methods(mut self, methods: impl IntoIterator<Item = Method>) -> Self {
        self.config().methods = methods.into_iter().collect();
        self
    }

    /// The header that carries the key (default `Idempotency-Key`); the same as
    /// `key_from(KeySource::Header(name))`.
    pub fn header_name(mut self, name: HeaderName) -> Self {
        self.config().key = KeySource::Header(name);
        self
    }

    /// Where each request's key comes from: a header (the default, `Idempotency-Key`), a field
    /// of the raw JSON body, or the SHA-256 of the raw body (for webhook senders that give no
    /// id). A key in the body is read after the body, within
    /// [`max_request_body`](Self::max_request_body).
    pub fn key_from(mut self, source: KeySource) -> Self {
        self.config().key = source;
        self
    }

    /// Refuses keyed methods without a key (400) instead of passing them through.
    pub fn require_key(mut self, required: bool) -> Self {
        self.config().require_key = required;
        self
    }

    /// Chooses the scope of each request's key (default: a hash of `Authorization`). Scope by
    /// the principal (a user or tenant id your authentication produced) rather than by raw
    /// credentials where tokens rotate: a refreshed token would otherwise make a retry a new
    /// request. A request for which `scope` returns `None` is refused with 400.
    pub fn scope(
        mut self,
        scope: impl Fn(&Parts) -> Option<Scope> + Send + Sync + 'static,
    ) -> Self {
        self.config().scope = Arc::new(scope);
        self
    }

    /// What a refused request without a scope is told to do (default: to send credentials in
    /// `Authorization`).
    pub fn scope_hint(mut self, hint: impl Into<std::borrow::Cow<'static, str>>) -> Self {
        self.config().scope_hint = hint.into();
        self
    }

    /// Counts a request header in the fingerprint (method, path and query, and body always count).
    pub fn fingerprint_header(mut self, name: HeaderName) -> Self {
        self.config().fingerprint_headers.push(name);
        self
    }

    /// How long an attempt holds its key before a retry may take over (default 30 s). Set it
    /// above the handler's longest run.
    pub fn lease(mut self, lease: Duration) -> Self {
        self.config().lease = lease;
        self
    }

    /// The largest request body accepted on a keyed request, in bytes (default 1 MiB); larger
    /// gets 413.
    pub fn max_request_body(mut self, bytes: usize) -> Self {
        self.config().max_request_body = bytes;
        self
    }

    /// The largest response body stored for replay, in bytes (default 1 MiB). A larger one is
    /// still sent whole to the first client; its retries get the same status and stored headers
    /// with an empty body and `Idempotent-Body-Omitted: too-large`, and the handler never runs
    /// again.
    pub fn max_stored_body(mut self, bytes: usize) -> Self {
        self.config().max_stored_body = bytes;
        self
    }

    /// The most keys one client (scope) may have in flight at once; a new key past it gets 429
    /// with `Retry-After` and runs nothing (default: no cap). It keeps one client from holding
    /// every handler and connection with requests it never lets finish.
    ///
    /// Counted in the key store after the claim (one indexed count of the scope's rows, on SQL
    /// stores; a store that cannot count, such as Redis, is not capped). Concurrent new keys
    /// may pass the cap by as many as arrive at once. With
    /// [`claim_in_transaction`](Self::claim_in_transaction), other requests' claims are
    /// invisible until they commit, so only [`max_keys_per_scope`](Self::max_keys_per_scope)
    /// holds there.
    pub fn max_in_flight_per_scope(mut self, keys: Option<u64>) -> Self {
        self.config().max_in_flight_per_scope = keys;
        self
    }

    /// The most keys one client (scope) may hold in the store, in flight or answered, within
    /// the retention window; a new key past it gets 429 and runs nothing (default: no cap).
    /// Stored keys cost the table about a kilobyte each plus the response: this bounds what
    /// one client can make it grow by. Replays of its stored keys still answer. Counted as
    /// [`max_in_flight_per_scope`](Self::max_in_flight_per_scope) is.
    pub fn max_keys_per_scope(mut self, keys: Option<u64>) -> Self {
        self.config().max_keys_per_scope = keys;
        self
    }

    /// The longest a request whose key is in flight waits for the first attempt's answer, then
    /// gets it as a replay (`Idempotent-Replayed: true`), byte for byte (default: zero, no
    /// wait: 409 with `Retry-After` at once, as Stripe and the IETF draft answer).
    ///
    /// A client may ask for less, or for none, with `Prefer: wait=N` (RFC 7240, seconds); the
    /// answer then says what was honoured in `Preference-Applied: wait=N`. Past the wait the
    /// request gets today's 409. If the first attempt releases its key (a 5xx, a rollback), one
    /// waiter takes it over and runs the request, and the others wait on that one.
    ///
    /// Waiters hold no database connection: an attempt of this process wakes its key's waiters
    /// the moment it ends; one of another process is noticed by the store's notification where
    /// it sends one (PostgreSQL's `NOTIFY`, Redis's `PUBLISH`), and by looking at the store
    /// again every [`in_flight_poll`](Self::in_flight_poll). How many may wait is capped
    /// ([`in_flight_waiters`](Self::in_flight_waiters)).
    pub fn in_flight_wait(mut self, wait: Duration) -> Self {
        self.config().in_flight_wait = wait;
        self
    }

    /// How often a request waiting under [`in_flight_wait`](Self::in_flight_wait) looks at the
    /// store again (default 100 ms): how soon it notices an attempt of another process ending
    /// where the store sends no notification (SQLite, MySQL, Redis), or the attempt's lease
    /// ending. Each look is one short statement; nothing holds a connection in between.
    pub fn in_flight_poll(mut self, poll: Duration) -> Self {
        self.config().in_flight_poll = poll.max(Duration::from_millis(1));
        self
    }

    /// The most requests that may wait on one key, and on all keys, under
    /// [`in_flight_wait`](Self::in_flight_wait) (default 100 and 1,000); past either, a
    /// request whose key is in flight gets 409 at once. One client cannot park thousands of
    /// requests on one key.
    pub fn in_flight_waiters(mut self, per_key: usize, in_all: usize) -> Self {
        self.config().waiting = Arc::new(crate::waiting::WaitRoom::new(per_key, in_all));
        self
    }

    /// The status for a key reused with another request (default 422; Stripe answers 400).
    pub fn mismatch_status(mut self, status: StatusCode) -> Self {
        self.config().mismatch_status = status;
        self
    }

    /// Stores and replays this response header too (default: `Content-Type`,
    /// `Content-Encoding`, `Content-Disposition`, `Content-Language`, `Location`, `ETag`,
    /// `Last-Modified`).
    pub fn store_header(mut self, name: HeaderName) -> Self {
        self.config().stored_headers.push(name);
        self
    }

    /// Answers retries of keys whose responses this process stored or replayed lately from
    /// memory, without a round trip to the store, after the same checks (scope, fingerprint);
    /// see [`ReplayCache`](crate::ReplayCache) for its bounds and the window in which it may
    /// replay a key the store no longer has (default: off).
    pub fn replay_cache(mut self, cache: crate::ReplayCache) -> Self {
        self.config().replay_cache = cache;
        self
    }

    /// The attempts running behind this layer (and every service it makes): wait for them to
    /// settle after a graceful shutdown, before the runtime goes.
    pub fn attempts(&self) -> crate::Attempts {
        self.config.attempts.clone()
    }

    /// Which handler statuses release the key instead of storing the response, so that a retry
    /// runs again (default: 5xx and 429).
    pub fn release_when(
        mut self,
        release: impl Fn(StatusCode) -> bool + Send + Sync + 'static,
    ) -> Self {
        self.config().release_when = Arc::new(release);
        self
    }
}

impl<S, M: Mode> Layer<S> for IdempotencyLayer<M> {
    type Service = Idempotency<S, M>;

    fn layer(&self, inner: S) -> Self::Service {
        Idempotency {
            inner,
            mode: self.mode.clone(),
            config: Arc::clone(&self.config),
        }
    }
}
