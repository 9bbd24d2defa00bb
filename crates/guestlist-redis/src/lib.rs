//! guestlist's idempotency-key store on Redis.
//!
//! For HTTP services whose work is **not** in a database: the key, its lease and the stored
//! response live in Redis, outside any transaction of the handler's. A crash after the handler's
//! work and before the response is stored leaves the key in flight until its lease ends, and the
//! retry then runs the handler again. Where the work is in PostgreSQL, SQLite or MySQL, prefer
//! the SQL store in transactional mode, which commits the response with the work.
//!
//! Each operation is one Lua script, so claims, take-overs (by compare-and-set on the attempt)
//! and completions are atomic; time comes from Redis's own clock, so every instance agrees on
//! when a lease ends. Keys expire after the retention (24 hours unless set): no purge needed.
//!
//! The guarantee then rests on Redis keeping every key it acknowledged until it expires: run it
//! with `appendonly yes` (`appendfsync everysec` loses at most a second of keys to a crash,
//! `always` none) and `maxmemory-policy noeviction`. [`RedisKeyStore::persistence`] reads those
//! settings and says what in them can lose a key. Replication is asynchronous: a failover to a
//! replica may lose the last keys written.
//!
//! ```no_run
//! # async fn run() -> Result<(), guestlist_redis::Error> {
//! let keys = guestlist_redis::RedisKeyStore::connect("redis://127.0.0.1:6379").await?;
//! // IdempotencyLayer::new(keys) in guestlist-http
//! # Ok(()) }
//! ```
//!
//! The guide tells the whole story, with each part's guarantees and failure tables: see
//! [Idempotency-Key for HTTP APIs](https://github.com/guestlist-rs/guestlist/blob/main/docs/guide/src/http.md)
//! (or build it locally with `mdbook serve docs/guide`).

use std::time::Duration;

use guestlist_core::{
    Attempt, Completed, Fingerprint, IdempotencyKey, KeyClaim, KeyStore, Retention, Scope,
    StoredBody, StoredResponse,
};
use redis::aio::ConnectionManager;
use redis::{Script, Value};

mod operator;
mod persistence;

pub use persistence::Persistence;

mod notices;
use notices::Notices;

/// A failure of the Redis store.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// Redis refused, failed, or could not be reached.
    #[error("redis error: {0} — check that Redis runs and that the URL is right")]
    Redis(#[from] redis::RedisError),
    /// A script answered something this store does not understand.
    #[error("unexpected answer from a guestlist script: {0}")]
    Protocol(String),
}

/// Idempotency keys in Redis: one hash per key, expiring after the retention.
#[derive(Clone)]
pub struct RedisKeyStore {
    conn: ConnectionManager,
    prefix: String,
    retention: Duration,
    scripts: &'static Scripts,
    /// What tells a request waiting on a key that another process answered it.
    notices: std::sync::Arc<Notices>,
}

impl std::fmt::Debug for RedisKeyStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RedisKeyStore")
            .field("prefix", &self.prefix)
            .field("retention", &self.retention)
            .finish_non_exhaustive()
    }
}

struct Scripts {
    claim: Script,
    complete: Script,
    release: Script,
    mark: Script,
}

fn scripts() -> &'static Scripts {
    static SCRIPTS: std::sync::OnceLock<Scripts> = std::sync::OnceLock::new();
    SCRIPTS.get_or_init(|| Scripts {
        claim: Script::new(include_str!("scripts/claim.lua")),
        complete: Script::new(include_str!("scripts/complete.lua")),
        release: Script::new(include_str!("scripts/release.lua")),
        mark: Script::new(include_str!("scripts/mark.lua")),
    })
}

impl RedisKeyStore {
    /// Keys kept 24 hours, the HTTP default.
    pub const DEFAULT_RETENTION: Duration = Duration::from_secs(24 * 3600);

    /// Connects to `url` (`redis://host:port/db`), reconnecting by itself after a failure.
    pub async fn connect(url: &str) -> Result<Self, Error> {
        let client = redis::Client::open(url)?;
        // One plain attempt first: the manager retries with backoff, and a wrong URL should fail
        // at once.
        drop(client.get_multiplexed_async_connection().await?);
        let store = Self::new(ConnectionManager::new(client.clone()).await?);
        Ok(store.notifying_through(client))
    }

    /// A store on an existing connection. Requests waiting on a key in flight
    /// (`IdempotencyLayer::in_flight_wait`) poll it, unless
    /// [`notifying_through`](Self::notifying_through) gives the store a client to subscribe
    /// with ([`connect`](Self::connect) does).
    pub fn new(conn: ConnectionManager) -> Self {
        Self {
            conn,
            prefix: "guestlist".to_owned(),
            retention: Self::DEFAULT_RETENTION,
            scripts: scripts(),
            notices: std::sync::Arc::new(Notices::new(None)),
        }
    }

    /// Subscribes through `client` (on one connection of its own, opened with the first wait)
    /// to the answers of keys that requests of this process wait on: another process's answer
    /// or release of a key marked waited is published on `<prefix>:answered`, and wakes them
    /// at once instead of at their next poll.
    pub fn notifying_through(mut self, client: redis::Client) -> Self {
        self.notices = std::sync::Arc::new(Notices::new(Some(client)));
        self
    }

    /// The channel a key's answer is published on when a request of another process waits.
    fn answered(&self) -> String {
        format!("{}:answered", self.prefix)
    }

    /// The prefix of every Redis key the store writes (default `guestlist`).
    pub fn prefix(mut self, prefix: impl Into<String>) -> Self {
        self.prefix = prefix.into();
        self
    }

    /// How long keys live (default 24 hours).
    pub fn retention(mut self, retention: Retention) -> Self {
        self.retention = retention.duration();
        self
    }

    /// The Redis key for `key` in `scope`. The scope's length goes first, so no two
    /// (scope, key) pairs can run together into one name.
    fn redis_key(&self, scope: &Scope, key: &IdempotencyKey) -> String {
        let scope = scope.as_str();
        format!("{}:{}:{scope}:{}", self.prefix, scope.len(), key.as_str())
    }
}

impl KeyStore for RedisKeyStore {
    type Error = Error;

    async fn claim(
        &self,
        scope: &Scope,
        key: &IdempotencyKey,
        fingerprint: &Fingerprint,
        lease: Duration,
    ) -> Result<KeyClaim, Error> {
        let token = getrandom::u64()
            .map_err(|err| Error::Protocol(format!("no randomness for a fencing token: {err}")))?;
        let answer: Vec<Value> = self
            .scripts
            .claim
            .key(self.redis_key(scope, key))
            .arg(fingerprint.to_hex())
            .arg(lease.as_millis() as u64)
            .arg(self.retention.as_millis() as u64)
            .arg(token.to_string())
            .invoke_async(&mut self.conn.clone())
            .await?;
        match answer.as_slice() {
            [tag, attempt] if text(tag) == "run" => Ok(KeyClaim::Run {
                attempt: Attempt::new(number(attempt)? as u32, token),
            }),
            [tag] if text(tag) == "mismatch" => Ok(KeyClaim::Mismatch),
            [tag, left] if text(tag) == "in_flight" => Ok(KeyClaim::InFlight {
                retry_after: Duration::from_millis(number(left)?.max(0) as u64),
            }),
            [tag, status, headers, body, omitted] if text(tag) == "replay" => {
                Ok(KeyClaim::Replay(StoredResponse {
                    status: text(status).parse().map_err(|_| protocol(status))?,
                    headers: StoredResponse::decode_headers(&bytes(headers)),
                    body: if text(omitted) == "1" {
                        StoredBody::TooLarge
                    } else {
                        StoredBody::Bytes(bytes(body))
                    },
                }))
            }
            other => Err(Error::Protocol(format!("{other:?}"))),
        }
    }

    async fn complete(
        &self,
        scope: &Scope,
        key: &IdempotencyKey,
        attempt: Attempt,
        response: &StoredResponse,
    ) -> Result<Completed, Error> {
        let (body, omitted) = match &response.body {
            StoredBody::Bytes(bytes) => (bytes.as_slice(), "0"),
            StoredBody::TooLarge => (&[][..], "1"),
        };
        let stored: i64 = self
            .scripts
            .complete
            .key(self.redis_key(scope, key))
            .arg(attempt.token().to_string())
            .arg(response.status)
            .arg(response.encode_headers())
            .arg(body)
            .arg(omitted)
            .arg(self.answered())
            .invoke_async(&mut self.conn.clone())
            .await?;
        Ok(if stored == 1 {
            Completed::Stored
        } else {
            Completed::Fenced
        })
    }

    async fn release(
        &self,
        scope: &Scope,
        key: &IdempotencyKey,
        attempt: Attempt,
    ) -> Result<bool, Error> {
        let released: i64 = self
            .scripts
            .release
            .key(self.redis_key(scope, key))
            .arg(attempt.token().to_string())
            .arg(self.answered())
            .invoke_async(&mut self.conn.clone())
            .await?;
        Ok(released == 1)
    }

    /// Marks the key waited on and waits for its answer's message (never without a client to
    /// subscribe with, nor when the key is no longer in flight: the waiter's poll looks again).
    async fn in_flight_ended(&self, scope: &Scope, key: &IdempotencyKey) {
        let name = self.redis_key(scope, key);
        let Some(notice) = self.notices.watch(&self.answered(), name.clone()).await else {
            return std::future::pending().await;
        };
        let marked = async {
            let marked: i64 = self
                .scripts
                .mark
                .key(name)
                .invoke_async(&mut self.conn.clone())
                .await?;
            Ok::<_, redis::RedisError>(marked == 1)
        };
        // Marked by the first waiter of this process until the answer's message; the others
        // wait without marking it again.
        if notice.heard(marked).await.is_err() {
            std::future::pending::<()>().await;
        }
    }
}

fn bytes(value: &Value) -> Vec<u8> {
    match value {
        Value::BulkString(bytes) => bytes.clone(),
        Value::SimpleString(s) => s.clone().into_bytes(),
        _ => Vec::new(),
    }
}

fn text(value: &Value) -> String {
    String::from_utf8_lossy(&bytes(value)).into_owned()
}

fn number(value: &Value) -> Result<i64, Error> {
    match value {
        Value::Int(n) => Ok(*n),
        other => Err(protocol(other)),
    }
}

fn protocol(value: &Value) -> Error {
    Error::Protocol(format!("{value:?}"))
}
