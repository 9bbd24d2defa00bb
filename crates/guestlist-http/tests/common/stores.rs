//! The key stores the suite runs against, each behind the same API under test.

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use axum::Router;
use axum::body::Bytes;
use axum::extract::State;
use axum::http::HeaderMap;
use axum::response::Response;
use axum::routing::post;
use guestlist_http::{IdempotencyLayer, IdempotentTx, Mode};
use guestlist_sqlx::SqlKeyStore;
use guestlist_testkit::{Database, Fixture, short_tag};

use super::app::{AppState, answer};

/// The start of every response body the test handler answers with, and so of every write of
/// one to a store.
pub const ANSWER_BODY: &[u8] = b"{\"payment\":\"pay_";

/// The layer's settings a test chooses.
#[derive(Debug, Clone)]
pub struct Settings {
    pub lease: Duration,
    pub max_request_body: usize,
    pub max_stored_body: usize,
    pub require_key: bool,
    pub methods: Option<Vec<axum::http::Method>>,
    pub header_name: Option<axum::http::HeaderName>,
    pub mismatch_status: Option<axum::http::StatusCode>,
    /// Scope keys by this request header instead of `Authorization`.
    pub scope_header: Option<&'static str>,
    pub fingerprint_header: Option<axum::http::HeaderName>,
    pub max_in_flight_per_scope: Option<u64>,
    pub max_keys_per_scope: Option<u64>,
    /// Answer retries from memory.
    pub replay_cache: Option<guestlist_http::ReplayCache>,
    /// Wait this long for the answer of a key in flight.
    pub in_flight_wait: Option<Duration>,
    /// Cap the waiters: per key, in all.
    pub in_flight_waiters: Option<(usize, usize)>,
    /// How often a waiter looks at the store.
    pub in_flight_poll: Option<Duration>,
}

impl Default for Settings {
    fn default() -> Self {
        Self {
            lease: Duration::from_secs(30),
            max_request_body: 64 * 1024,
            max_stored_body: 64 * 1024,
            require_key: false,
            methods: None,
            header_name: None,
            mismatch_status: None,
            scope_header: None,
            fingerprint_header: None,
            max_in_flight_per_scope: None,
            max_keys_per_scope: None,
            replay_cache: None,
            in_flight_wait: None,
            in_flight_waiters: None,
            in_flight_poll: None,
        }
    }
}

impl Settings {
    /// The defaults with a lease of `lease`.
    pub fn with_lease(lease: Duration) -> Self {
        Self {
            lease,
            ..Self::default()
        }
    }
}

/// Applies `settings` to a layer of any mode.
pub fn configure<M: Mode>(layer: IdempotencyLayer<M>, settings: &Settings) -> IdempotencyLayer<M> {
    let mut layer = layer
        .lease(settings.lease)
        .max_request_body(settings.max_request_body)
        .max_stored_body(settings.max_stored_body)
        .require_key(settings.require_key)
        .max_in_flight_per_scope(settings.max_in_flight_per_scope)
        .max_keys_per_scope(settings.max_keys_per_scope);
    if let Some(methods) = &settings.methods {
        layer = layer.methods(methods.clone());
    }
    if let Some(name) = &settings.header_name {
        layer = layer.header_name(name.clone());
    }
    if let Some(status) = settings.mismatch_status {
        layer = layer.mismatch_status(status);
    }
    if let Some(header) = settings.scope_header {
        layer = layer
            .scope(move |parts| {
                let tenant = parts.headers.get(header)?.to_str().ok()?;
                guestlist_core::Scope::new(format!("tenant:{tenant}")).ok()
            })
            .scope_hint("send X-Tenant");
    }
    if let Some(name) = &settings.fingerprint_header {
        layer = layer.fingerprint_header(name.clone());
    }
    if let Some(cache) = &settings.replay_cache {
        layer = layer.replay_cache(cache.clone());
    }
    if let Some(wait) = settings.in_flight_wait {
        layer = layer.in_flight_wait(wait);
    }
    if let Some((per_key, in_all)) = settings.in_flight_waiters {
        layer = layer.in_flight_waiters(per_key, in_all);
    }
    if let Some(poll) = settings.in_flight_poll {
        layer = layer.in_flight_poll(poll);
    }
    layer
}

/// A key store with the API under test in front of it.
pub trait Store: Send + Sync + Sized + 'static {
    const LABEL: &'static str;
    /// Whether the handler's writes and the stored response commit together.
    const TRANSACTIONAL: bool;
    /// Whether one writer holds the whole store (SQLite): a handler's open transaction keeps
    /// every other request's claim waiting, so an attempt can never lose its key mid-run.
    const SINGLE_WRITER: bool;
    /// Whether the claim rides on the handler's transaction behind a lock (PostgreSQL's
    /// `claim_in_transaction`): a dead attempt leaves nothing behind, a stalled one keeps its key.
    const LOCKED_CLAIM: bool = false;
    /// Whether the store counts a scope's keys, so that per-scope caps apply (not Redis).
    const COUNTS_KEYS: bool = true;

    /// Whether a key held by a process that died is free for a retry at once, not after the
    /// lease: a claim on the handler's transaction, or a committed claim whose holder's session
    /// the database can see end (PostgreSQL, MySQL).
    fn frees_at_once() -> bool {
        Self::LOCKED_CLAIM
    }

    /// Whether the store tells a request waiting on a key that another process answered it
    /// (PostgreSQL's `NOTIFY`, Redis's `PUBLISH`), rather than leaving it to poll.
    fn notifies() -> bool {
        false
    }

    /// The frame on the store's wire after which a response's storing is ambiguous when the
    /// connection dies: the `COMMIT` of the handler's transaction (transactional mode), the
    /// write that carries the response's body (plain mode); `None` for SQLite, which has no
    /// wire.
    fn answer_frame() -> Option<&'static [u8]>;

    /// Fresh tables for the test `name`.
    fn open(name: &str) -> impl Future<Output = Self> + Send;
    /// The tables of test `tag` at `url`, as they are (for a child process).
    fn attach(url: &str, tag: &str) -> impl Future<Output = Self> + Send;
    /// Fresh tables for the test `name` on the database at `url` (a server of the test's own).
    fn open_at(url: &str, name: &str) -> impl Future<Output = Self> + Send;
    fn url(&self) -> &str;
    fn tag(&self) -> &str;
    /// `POST /payments` behind the layer.
    fn router(&self, state: AppState, settings: &Settings) -> Router;
    /// The effects that survived: committed payment rows, or executions where the handler's
    /// work is not in the store's database.
    fn effects(&self, state: &AppState) -> impl Future<Output = u64> + Send;
    /// Keys the store holds.
    fn stored_keys(&self) -> impl Future<Output = u64> + Send;
    /// Removes every key the store holds, as an operator's eviction or the purge would.
    fn forget_keys(&self) -> impl Future<Output = ()> + Send;
    /// Keys a waiting request marked for a notice, where the store notifies (else 0).
    fn waited_on(&self) -> impl Future<Output = u64> + Send {
        async { 0 }
    }
}

/// The [`Store`] methods a store that wraps another (to put another layer in front) passes on.
macro_rules! wraps_store {
    ($inner:ident) => {
        async fn open(name: &str) -> Self {
            Self($inner::open(name).await)
        }

        async fn attach(url: &str, tag: &str) -> Self {
            Self($inner::attach(url, tag).await)
        }

        async fn open_at(url: &str, name: &str) -> Self {
            Self($inner::open_at(url, name).await)
        }

        fn url(&self) -> &str {
            self.0.url()
        }

        fn tag(&self) -> &str {
            self.0.tag()
        }

        async fn stored_keys(&self) -> u64 {
            self.0.stored_keys().await
        }

        async fn forget_keys(&self) {
            self.0.forget_keys().await;
        }

        async fn waited_on(&self) -> u64 {
            self.0.waited_on().await
        }
    };
}

/// A SQL store in transactional mode: the payment row and the response commit together.
pub struct Sql<DB: Fixture> {
    db: Database<DB>,
    keys: SqlKeyStore<DB>,
    tag: String,
}

impl<DB: Fixture> Sql<DB> {
    /// The key store behind the layer.
    pub fn keys(&self) -> &SqlKeyStore<DB> {
        &self.keys
    }

    fn payments(&self) -> String {
        format!("payments_{}", self.tag)
    }

    /// `POST`, `PATCH` and `PUT /payments` with the payment row on the request's transaction,
    /// behind `layer` configured by `settings`.
    fn transactional_router<M: Mode>(
        &self,
        layer: IdempotencyLayer<M>,
        state: AppState,
        settings: &Settings,
    ) -> Router {
        Router::new()
            .route(
                "/payments",
                post(pay_in_transaction::<DB>)
                    .patch(pay_in_transaction::<DB>)
                    .put(pay_in_transaction::<DB>),
            )
            .with_state((state, Arc::from(self.payments())))
            .layer(configure(layer, settings))
    }

    /// Fresh tables for the test `name` on `db`.
    async fn fresh(db: Database<DB>, name: &str) -> Self {
        let store = Self::around(db, &short_tag(name)).await;
        for table in [store.keys.table().to_string(), store.payments()] {
            store.db.exec(format!("DROP TABLE IF EXISTS {table}")).await;
        }
        store.keys.migrate().await.expect("migrate the key store");
        store
            .db
            .exec(format!(
                "CREATE TABLE {} (id VARCHAR(64) PRIMARY KEY, request_bytes BIGINT NOT NULL)",
                store.payments()
            ))
            .await;
        store
    }

    async fn around(db: Database<DB>, tag: &str) -> Self {
        let keys = SqlKeyStore::with_table(db.pool.clone(), &format!("keys_{tag}")).unwrap();
        Self {
            db,
            keys,
            tag: tag.to_owned(),
        }
    }
}

/// The payment handler in transactional mode: its row rides on the request's transaction.
async fn pay_in_transaction<DB: Fixture>(
    State((state, table)): State<(AppState, Arc<str>)>,
    mut tx: IdempotentTx<DB>,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    let payment = state.execute();
    let insert = format!(
        "INSERT INTO {table} (id, request_bytes) VALUES ('{payment}', {})",
        body.len()
    );
    DB::exec(&mut tx, insert).await.expect("insert the payment");
    state.pause_if_asked(&headers).await;
    answer(&payment, &headers, &body)
}

impl<DB: Fixture> Store for Sql<DB> {
    const LABEL: &'static str = DB::LABEL;
    const TRANSACTIONAL: bool = true;
    const SINGLE_WRITER: bool = !DB::ROW_LOCKS;

    fn answer_frame() -> Option<&'static [u8]> {
        DB::COMMIT_FRAME
    }

    async fn open(name: &str) -> Self {
        Self::fresh(Database::open(48).await, name).await
    }

    async fn open_at(url: &str, name: &str) -> Self {
        Self::fresh(Database::attach(url, 16).await, name).await
    }

    async fn attach(url: &str, tag: &str) -> Self {
        Self::around(Database::attach(url, 32).await, tag).await
    }

    fn url(&self) -> &str {
        &self.db.url
    }

    fn tag(&self) -> &str {
        &self.tag
    }

    fn frees_at_once() -> bool {
        SqlKeyStore::<DB>::detects_dead_holders()
    }

    fn notifies() -> bool {
        DB::LABEL.starts_with("PostgreSQL")
    }

    fn router(&self, state: AppState, settings: &Settings) -> Router {
        let layer = IdempotencyLayer::transactional(self.keys.clone());
        self.transactional_router(layer, state, settings)
    }

    async fn effects(&self, _: &AppState) -> u64 {
        self.db
            .scalar(format!("SELECT count(*) FROM {}", self.payments()))
            .await as u64
    }

    async fn stored_keys(&self) -> u64 {
        self.db
            .scalar(format!("SELECT count(*) FROM {}", self.keys.table()))
            .await as u64
    }

    async fn forget_keys(&self) {
        self.db
            .exec(format!("DELETE FROM {}", self.keys.table()))
            .await;
    }

    async fn waited_on(&self) -> u64 {
        if !Self::notifies() {
            return 0;
        }
        let table = self.keys.table();
        self.db
            .scalar(format!("SELECT count(*) FROM {table} WHERE waited"))
            .await as u64
    }
}

/// PostgreSQL in transactional mode with the claim on the handler's transaction.
#[cfg(feature = "postgres")]
pub struct LockedPostgres(Sql<sqlx::Postgres>);

#[cfg(feature = "postgres")]
impl Store for LockedPostgres {
    const LABEL: &'static str = "PostgreSQL, claim in transaction";
    const TRANSACTIONAL: bool = true;
    const SINGLE_WRITER: bool = false;
    const LOCKED_CLAIM: bool = true;

    fn answer_frame() -> Option<&'static [u8]> {
        Some(guestlist_testkit::fault_proxy::POSTGRES_COMMIT)
    }

    wraps_store!(Sql);

    fn router(&self, state: AppState, settings: &Settings) -> Router {
        let layer = IdempotencyLayer::transactional(self.0.keys.clone()).claim_in_transaction();
        self.0.transactional_router(layer, state, settings)
    }

    async fn effects(&self, state: &AppState) -> u64 {
        self.0.effects(state).await
    }
}

/// A SQL store in plain mode, as the gateway uses it: the handler's work is elsewhere (here, a
/// counter in memory), and the response is stored on its own after the handler.
pub struct PlainSql<DB: Fixture>(Sql<DB>);

/// `POST /payments` behind the layer in plain mode on `keys`.
fn plain_router<K: guestlist_core::KeyStore>(
    keys: K,
    state: AppState,
    settings: &Settings,
) -> Router {
    Router::new()
        .route("/payments", post(pay))
        .with_state(state)
        .layer(configure(IdempotencyLayer::new(keys), settings))
}

/// The payment handler in plain mode.
async fn pay(State(state): State<AppState>, headers: HeaderMap, body: Bytes) -> Response {
    let payment = state.execute();
    state.pause_if_asked(&headers).await;
    answer(&payment, &headers, &body)
}

impl<DB: Fixture> Store for PlainSql<DB> {
    const LABEL: &'static str = DB::LABEL;
    const TRANSACTIONAL: bool = false;
    const SINGLE_WRITER: bool = false;

    fn answer_frame() -> Option<&'static [u8]> {
        DB::COMMIT_FRAME.map(|_| ANSWER_BODY)
    }

    wraps_store!(Sql);

    fn frees_at_once() -> bool {
        Sql::<DB>::frees_at_once()
    }

    fn notifies() -> bool {
        Sql::<DB>::notifies()
    }

    fn router(&self, state: AppState, settings: &Settings) -> Router {
        plain_router(self.0.keys.clone(), state, settings)
    }

    async fn effects(&self, state: &AppState) -> u64 {
        state.executions()
    }
}

/// A database in plain mode with concurrent requests' claims and responses written in rounds
/// ([`guestlist_sqlx::BatchedKeyStore`]), as the gateway uses it.
pub struct Batched<DB: Fixture>(PlainSql<DB>);

/// The label of a batched store.
pub trait BatchedLabel {
    const BATCHED: &'static str;
}

#[cfg(feature = "postgres")]
impl BatchedLabel for sqlx::Postgres {
    const BATCHED: &'static str = "PostgreSQL, batched";
}

#[cfg(feature = "sqlite")]
impl BatchedLabel for sqlx::Sqlite {
    const BATCHED: &'static str = "SQLite, batched";
}

impl<DB: Fixture + guestlist_sqlx::BatchBackend + BatchedLabel> Store for Batched<DB> {
    const LABEL: &'static str = DB::BATCHED;
    const TRANSACTIONAL: bool = false;
    const SINGLE_WRITER: bool = false;

    fn answer_frame() -> Option<&'static [u8]> {
        PlainSql::<DB>::answer_frame()
    }

    wraps_store!(PlainSql);

    fn frees_at_once() -> bool {
        Sql::<DB>::frees_at_once()
    }

    fn notifies() -> bool {
        Sql::<DB>::notifies()
    }

    fn router(&self, state: AppState, settings: &Settings) -> Router {
        let keys = guestlist_sqlx::BatchedKeyStore::new(self.0.0.keys.clone());
        plain_router(keys, state, settings)
    }

    async fn effects(&self, state: &AppState) -> u64 {
        state.executions()
    }
}

/// Redis, in plain mode: the key and the response live outside the handler's work.
pub struct Redis {
    keys: guestlist_redis::RedisKeyStore,
    conn: redis::aio::ConnectionManager,
    url: String,
    tag: String,
}

impl Redis {
    const URL_VAR: &'static str = "GUESTLIST_TEST_REDIS_URL";

    async fn around(url: &str, tag: &str) -> Self {
        let client = redis::Client::open(url).expect("a Redis URL");
        let connect = redis::aio::ConnectionManager::new(client.clone());
        let conn = tokio::time::timeout(Duration::from_secs(10), connect)
            .await
            .map_err(|_| "timed out".to_owned())
            .and_then(|conn| conn.map_err(|err| err.to_string()))
            .unwrap_or_else(|err| {
                panic!(
                    "Redis at {url}: {err}\nRun scripts/test.sh, which installs and starts every \
                     service the tests need, or start it with `redis-server --daemonize yes --bind \
                     127.0.0.1 --port 6379 --save \"\" --appendonly no`, or point {} at a running server.",
                    Self::URL_VAR
                )
            });
        Self {
            keys: guestlist_redis::RedisKeyStore::new(conn.clone())
                .prefix(format!("gltest:{tag}"))
                .notifying_through(client),
            conn,
            url: url.to_owned(),
            tag: tag.to_owned(),
        }
    }

    async fn our_keys(&self) -> Vec<String> {
        redis::cmd("KEYS")
            .arg(format!("gltest:{}:*", self.tag))
            .query_async(&mut self.conn.clone())
            .await
            .expect("KEYS")
    }
}

impl Store for Redis {
    const LABEL: &'static str = "Redis";
    const TRANSACTIONAL: bool = false;
    const SINGLE_WRITER: bool = false;
    const COUNTS_KEYS: bool = false;

    fn notifies() -> bool {
        true
    }

    fn answer_frame() -> Option<&'static [u8]> {
        Some(ANSWER_BODY)
    }

    async fn open(name: &str) -> Self {
        let url =
            std::env::var(Self::URL_VAR).unwrap_or_else(|_| "redis://127.0.0.1:6379".to_owned());
        Self::open_at(&url, name).await
    }

    async fn open_at(url: &str, name: &str) -> Self {
        let store = Self::around(url, &short_tag(name)).await;
        for key in store.our_keys().await {
            let _: i64 = redis::cmd("DEL")
                .arg(key)
                .query_async(&mut store.conn.clone())
                .await
                .unwrap();
        }
        store
    }

    async fn attach(url: &str, tag: &str) -> Self {
        Self::around(url, tag).await
    }

    fn url(&self) -> &str {
        &self.url
    }

    fn tag(&self) -> &str {
        &self.tag
    }

    fn router(&self, state: AppState, settings: &Settings) -> Router {
        plain_router(self.keys.clone(), state, settings)
    }

    async fn effects(&self, state: &AppState) -> u64 {
        state.executions()
    }

    async fn stored_keys(&self) -> u64 {
        self.our_keys().await.len() as u64
    }

    async fn waited_on(&self) -> u64 {
        let mut marked = 0;
        for key in self.our_keys().await {
            let waited: Option<String> = redis::cmd("HGET")
                .arg(&key)
                .arg("waited")
                .query_async(&mut self.conn.clone())
                .await
                .unwrap_or_default();
            marked += u64::from(waited.is_some());
        }
        marked
    }

    async fn forget_keys(&self) {
        for key in self.our_keys().await {
            let _: () = redis::cmd("DEL")
                .arg(&key)
                .query_async(&mut self.conn.clone())
                .await
                .expect("DEL");
        }
    }
}

/// The sealing keys the sealed stores use: a current key and an older one.
#[cfg(feature = "postgres")]
pub fn test_sealing() -> guestlist_sqlx::Sealing {
    guestlist_sqlx::Sealing::parse(&format!("new:{},old:{}", "5a".repeat(32), "a5".repeat(32)))
        .unwrap()
}

/// The secret the sealed stores hash keys with.
#[cfg(feature = "postgres")]
pub fn test_hashing() -> guestlist_sqlx::KeyHashing {
    guestlist_sqlx::KeyHashing::parse(&"c0".repeat(32)).unwrap()
}

/// PostgreSQL in transactional mode with response bodies sealed and keys hashed at rest.
#[cfg(feature = "postgres")]
pub struct SealedPostgres(Sql<sqlx::Postgres>);

#[cfg(feature = "postgres")]
impl SealedPostgres {
    /// Every stored key, as an operator reading the table sees it.
    pub async fn keys_at_rest(&self) -> Vec<String> {
        let sql = format!("SELECT idempotency_key FROM {}", self.0.keys.table());
        sqlx::query_scalar(sqlx::AssertSqlSafe(sql))
            .fetch_all(&self.0.db.pool)
            .await
            .unwrap()
    }

    /// The raw bytes of every stored body, as an operator reading the table sees them.
    pub async fn bodies_at_rest(&self) -> Vec<Vec<u8>> {
        let sql = format!(
            "SELECT body FROM {} WHERE body IS NOT NULL",
            self.0.keys.table()
        );
        sqlx::query_scalar(sqlx::AssertSqlSafe(sql))
            .fetch_all(&self.0.db.pool)
            .await
            .unwrap()
    }
}

#[cfg(feature = "postgres")]
impl Store for SealedPostgres {
    const LABEL: &'static str = "PostgreSQL, sealed bodies and hashed keys";
    const TRANSACTIONAL: bool = true;
    const SINGLE_WRITER: bool = false;

    fn answer_frame() -> Option<&'static [u8]> {
        Some(guestlist_testkit::fault_proxy::POSTGRES_COMMIT)
    }

    wraps_store!(Sql);

    fn frees_at_once() -> bool {
        true
    }

    fn notifies() -> bool {
        true
    }

    fn router(&self, state: AppState, settings: &Settings) -> Router {
        let keys = self
            .0
            .keys
            .clone()
            .sealed(test_sealing())
            .hashing_keys(test_hashing());
        let layer = IdempotencyLayer::transactional(keys);
        self.0.transactional_router(layer, state, settings)
    }

    async fn effects(&self, state: &AppState) -> u64 {
        self.0.effects(state).await
    }
}
