//! Idempotency keys in SQL: the store behind the HTTP layer.

use std::sync::Arc;
use std::time::Duration;

use guestlist_core::protocol::{KeyRowView, Settlement, settle};
use guestlist_core::{
    Attempt, Completed, Fingerprint, IdempotencyKey, KeyClaim, KeyStore, Retention, Scope,
    ScopeUsage, StoredBody, StoredResponse, TableName,
};
use sqlx::Pool;

use crate::Error;
use crate::backend::keys::{Complete, Insert, Key, TakeOver, release, select, unhold};
use crate::backend::steps::{Done, StepsSql};
use crate::backend::{Backend, KeyRow, KeysSql, TableSql};
use crate::fencing::{lease_ms, new_token};
use crate::purge::{Purge, Purgeable, sealed};
use crate::scaffold::{clone_without_bound, on_one_table};

#[cfg(any(feature = "postgres", feature = "sqlite"))]
mod batched;
mod holder;
use holder::Holder;
mod inspect;
pub(crate) use inspect::key_state;
mod locked;
mod notices;
use notices::Notices;
mod sealing;
mod steps;

#[cfg(any(feature = "postgres", feature = "sqlite"))]
pub use batched::{BatchBackend, BatchedKeyStore};
pub use guestlist_core::{HeldKey, KeyRecord, KeyState, KeyStats};
pub use sealing::{KeyHashing, Sealing};

/// How often [`SqlKeyStore::claim`](KeyStore::claim) goes round when the row changes under it (released,
/// purged, taken over) before it answers "in flight".
pub(crate) const CLAIM_ROUNDS: usize = 5;

/// Idempotency keys kept in PostgreSQL, SQLite or MySQL/MariaDB.
///
/// [`SqlKeyStore::claim`](KeyStore::claim) claims a key insert-first with a lease, committed on its own so that
/// concurrent retries see it. The response is then stored with [`SqlKeyStore::complete_in`] on
/// the handler's own transaction (its writes and the response commit together), or with
/// [`SqlKeyStore::complete`](KeyStore::complete) on its own ("plain mode"). Both check the attempt, a fencing token:
/// an attempt whose lease expired and was taken over can neither store nor release.
///
/// It holds its pool, as the parts that run on their own do: the HTTP layer calls it through
/// [`KeyStore`](guestlist_core::KeyStore) with nothing else at hand. (The [`crate::Inbox`] and the
/// [`crate::Outbox`], whose calls join the caller's transaction, take the pool per call.)
///
/// ```no_run
/// # async fn run(pool: sqlx::PgPool) -> Result<(), guestlist_sqlx::Error> {
/// use std::time::Duration;
/// use guestlist_sqlx::{Fingerprint, IdempotencyKey, KeyClaim, KeyStore, Scope, SqlKeyStore};
///
/// let keys = SqlKeyStore::new(pool.clone());
/// keys.migrate().await?;
/// let scope = Scope::from_credentials(b"Bearer sk_test_123");
/// let key = IdempotencyKey::new("8e03978e-40d5-43e8-bc93-6894a57f9324")?;
/// let fingerprint = Fingerprint::builder("POST", "/payments").body(b"{\"amount\":100}");
/// match keys.claim(&scope, &key, &fingerprint, Duration::from_secs(30)).await? {
///     KeyClaim::Run { attempt } => { /* run the handler, then complete or release */ }
///     KeyClaim::Replay(response) => { /* send it again */ }
///     KeyClaim::InFlight { retry_after } => { /* 409, Retry-After */ }
///     KeyClaim::Mismatch => { /* 422 */ }
/// }
/// # Ok(()) }
/// ```
pub struct SqlKeyStore<DB: Backend> {
    pool: Pool<DB>,
    pub(crate) sql: Arc<KeysSql>,
    /// The journal of requests' steps (`<keys>_steps`).
    pub(crate) steps: Arc<StepsSql>,
    /// Seals stored bodies at rest, when set.
    sealing: Option<Sealing>,
    /// Stores keys as keyed hashes, when set.
    hashing: Option<KeyHashing>,
    /// What tells a retry that the process holding a key died (PostgreSQL, MySQL).
    holder: Holder,
    /// What tells a request waiting on a key that another process answered it (PostgreSQL).
    notices: Notices,
}

clone_without_bound!(SqlKeyStore<DB: Backend> { pool, sql, steps, sealing, hashing, holder, notices });
on_one_table!(SqlKeyStore, "Keys", "guestlist_keys", pool: Pool<DB>);

impl<DB: Backend> SqlKeyStore<DB> {
    /// Keys in an already validated table.
    pub fn in_table(pool: Pool<DB>, table: TableName) -> Self {
        let sql = KeysSql::new::<DB>(&table);
        Self {
            pool,
            holder: Holder::new(&sql),
            notices: Notices::new(&sql),
            sql: Arc::new(sql),
            steps: Arc::new(StepsSql::new::<DB>(&table, Done::keys(&table))),
            sealing: None,
            hashing: None,
        }
    }

    /// Seals the response bodies this store writes (AES-256-GCM, see [`Sealing`]), so that
    /// reading the key table reveals no response; bodies it reads are opened, and bodies stored
    /// before sealing was turned on are read as they are. Every instance on the table needs the
    /// same keys.
    pub fn sealed(mut self, sealing: Sealing) -> Self {
        self.sealing = Some(sealing);
        self
    }

    /// Stores each key as a keyed hash of it ([`KeyHashing`]), so that reading the key table
    /// reveals no client's keys. Operators then look a key up by the raw key with the same
    /// secret (`guestlist keys inspect` reads it from `GUESTLIST_KEY_HASHING_SECRET`). Every
    /// instance on the table needs the same secret; keys stored before it was set are not found
    /// under it (their retries run again once).
    pub fn hashing_keys(mut self, hashing: KeyHashing) -> Self {
        self.hashing = Some(hashing);
        self
    }

    /// A key as it is stored: a keyed hash of it, when hashing is on.
    pub(crate) fn key_at_rest<'k>(
        &self,
        key: &'k IdempotencyKey,
    ) -> std::borrow::Cow<'k, IdempotencyKey> {
        match &self.hashing {
            Some(hashing) => std::borrow::Cow::Owned(hashing.hash(key)),
            None => std::borrow::Cow::Borrowed(key),
        }
    }

    /// A response body as it is stored: sealed for its row, when sealing is on.
    pub(crate) fn body_at_rest(
        &self,
        scope: &Scope,
        key: &IdempotencyKey,
        body: Option<&[u8]>,
    ) -> Result<Option<Vec<u8>>, Error> {
        match (&self.sealing, body) {
            (Some(sealing), Some(body)) => sealing.seal(scope, key, body).map(Some),
            (_, body) => Ok(body.map(<[u8]>::to_vec)),
        }
    }

    /// The table that holds the keys.
    pub fn table(&self) -> &TableName {
        &self.sql.common.table
    }

    /// The pool the store runs on.
    pub fn pool(&self) -> &Pool<DB> {
        &self.pool
    }

    /// The DDL that [`SqlKeyStore::migrate`] runs, for users who run their own migrations; the
    /// same text ships as `sql/<backend>/keys.sql`.
    pub fn ddl(&self) -> &[String] {
        &self.sql.common.ddl
    }

    /// Begins a transaction for a handler's writes and its stored response: `BEGIN IMMEDIATE` on
    /// SQLite (the write lock up front), a plain `BEGIN` elsewhere.
    pub async fn begin(&self) -> Result<sqlx::Transaction<'static, DB>, Error> {
        Ok(DB::begin(&self.pool).await?)
    }

    /// Creates the table and its `created_at` index if they are missing.
    pub async fn migrate(&self) -> Result<(), Error> {
        let mut conn = self.pool.acquire().await?;
        self.sql.common.migrate::<DB>(&mut conn).await?;
        Ok(())
    }

    /// A purge of the keys older than `retention` (24 hours is the usual choice), and of the
    /// steps journals of requests left mid-steps whose run was last touched longer ago.
    pub fn purge(&self, retention: Retention) -> Purge<'_, DB> {
        Purge::new(&self.sql.common, retention).with_journals(Some(&self.steps))
    }

    /// What a claim that found the key's row already there answers: another request's
    /// fingerprint, a stored response, a lease still held, or a take-over of an expired lease
    /// for `take_over` more milliseconds (`None` where another request holds the key's lock and
    /// any take-over is its to make: an expired lease then answers "in flight" too). `None` when
    /// the row went or changed under us (released, purged, taken over or completed between the
    /// read and the take-over): claim again.
    pub(crate) async fn settle(
        &self,
        conn: &mut DB::Connection,
        scope: &Scope,
        key: &IdempotencyKey,
        fingerprint: &Fingerprint,
        take_over: Option<i64>,
    ) -> Result<Option<KeyClaim>, Error> {
        let select = select(Key::of(scope, key));
        let row = DB::fetch_first(conn, &*self.sql, select)
            .await
            .map_err(|err| self.error(err))?;
        self.settle_row(conn, scope, key, fingerprint, row, take_over)
            .await
    }

    /// [`SqlKeyStore::settle`] on a row already read (`None`: there was none).
    pub(crate) async fn settle_row(
        &self,
        conn: &mut DB::Connection,
        scope: &Scope,
        key: &IdempotencyKey,
        fingerprint: &Fingerprint,
        row: Option<KeyRow>,
        take_over: Option<i64>,
    ) -> Result<Option<KeyClaim>, Error> {
        let Some(mut row) = row else {
            return Ok(None);
        };
        let view = KeyRowView {
            same_request: row.fingerprint == fingerprint.as_bytes(),
            answered: row.status.is_some(),
            lease_left_ms: row.lease_left_ms.unwrap_or(0),
        };
        let lease_ms = match settle(view, take_over) {
            Settlement::Mismatch => return Ok(Some(KeyClaim::Mismatch)),
            Settlement::Replay => {
                // Only with sealing on is the body taken out, to be opened.
                if let Some(sealing) = &self.sealing
                    && let Some(body) = row.body.take()
                {
                    row.body = Some(sealing.open(scope, key, body)?);
                }
                return Ok(Some(replay_of(row)));
            }
            Settlement::InFlight { retry_after_ms } => {
                if take_over.is_some() && self.cut_if_holder_gone(conn, scope, key, &row).await? {
                    return Ok(None); // the next round takes the key over
                }
                let retry_after = Duration::from_millis(retry_after_ms);
                return Ok(Some(KeyClaim::InFlight { retry_after }));
            }
            Settlement::TakeOver(lease_ms) => lease_ms,
        };
        let (scope, key) = (scope.as_str(), key.as_str());
        let token = new_token()?;
        let take_over = TakeOver {
            token: token as i64,
            lease_ms,
            key: Key { scope, key },
            held: row.token,
        };
        if DB::run(conn, &*self.sql, take_over).await? != 1 {
            return Ok(None);
        }
        let number = u32::try_from(row.attempt + 1).unwrap_or(u32::MAX);
        tracing::info!(
            scope,
            key,
            attempt = number,
            "lease expired; taking over the key"
        );
        Ok(Some(KeyClaim::Run {
            attempt: Attempt::new(number, token),
        }))
    }

    /// Stores `response` on the handler's transaction `conn`, if `attempt` still holds the key.
    /// On [`Completed::Fenced`] roll the transaction back: another attempt owns the key now.
    pub async fn complete_in(
        &self,
        conn: &mut DB::Connection,
        scope: &Scope,
        key: &IdempotencyKey,
        attempt: Attempt,
        response: &StoredResponse,
    ) -> Result<Completed, Error> {
        let key = &*self.key_at_rest(key);
        let headers = response.encode_headers();
        let body = self.body_at_rest(scope, key, response.body.stored_bytes())?;
        let complete = Complete {
            status: i32::from(response.status),
            headers: &headers,
            body: body.as_deref(),
            key: Key::of(scope, key),
            token: attempt.token() as i64,
        };
        let stored = DB::run(conn, &*self.sql, complete)
            .await
            .map_err(|err| self.error(err))?;
        Ok(if stored == 1 {
            Completed::Stored
        } else {
            Completed::Fenced
        })
    }

    pub(crate) fn error(&self, err: sqlx::Error) -> Error {
        Error::from_store::<DB>(self.table(), err)
    }
}

/// The replay of a completed row.
fn replay_of(row: KeyRow) -> KeyClaim {
    let status = row.status.unwrap_or(500);
    KeyClaim::Replay(stored_response(status, row))
}

/// A stored response read back from its row.
fn stored_response(status: i32, row: KeyRow) -> StoredResponse {
    StoredResponse {
        status: u16::try_from(status).unwrap_or(500),
        headers: StoredResponse::decode_headers(row.headers.as_deref().unwrap_or_default()),
        body: row.body.map_or(StoredBody::TooLarge, StoredBody::Bytes),
    }
}

impl<DB: Backend> sealed::Sealed for SqlKeyStore<DB> {}

impl<DB: Backend> Purgeable<DB> for SqlKeyStore<DB> {
    fn purge_table(&self) -> Arc<TableSql> {
        Arc::clone(&self.sql.common)
    }

    fn purge_journals(&self) -> Option<Arc<StepsSql>> {
        Some(Arc::clone(&self.steps))
    }
}

impl<DB: Backend> KeyStore for SqlKeyStore<DB> {
    type Error = Error;

    /// Claims `key` in `scope` with a lease of `lease`, committed at once; or reports a stored
    /// response, a valid lease held by another attempt, or another request's fingerprint. An
    /// expired lease is taken over by compare-and-set on the attempt.
    ///
    /// The key's row is read first, by primary key, so that a retry of a stored answer costs one
    /// read and no write; a key with no row is claimed insert-first (`ON CONFLICT DO NOTHING`),
    /// and the insert arbitrates between racers.
    async fn claim(
        &self,
        scope: &Scope,
        key: &IdempotencyKey,
        fingerprint: &Fingerprint,
        lease: Duration,
    ) -> Result<KeyClaim, Error> {
        let key = &*self.key_at_rest(key);
        let lease_ms = lease_ms(lease);
        let holder = self.holder().await;
        let mut conn = self.pool.acquire().await?;
        // Read first: a retry of a stored answer is replayed by one read by primary key, with no
        // write. Only a key with no row goes on to the insert, which arbitrates between racers.
        if let Some(found) = self
            .settle(&mut conn, scope, key, fingerprint, Some(lease_ms))
            .await?
        {
            return Ok(found);
        }
        for _ in 0..CLAIM_ROUNDS {
            let token = new_token()?;
            let insert = Insert {
                key: Key::of(scope, key),
                fingerprint: fingerprint.as_bytes(),
                token: token as i64,
                lease_ms,
                holder,
            };
            let inserted = DB::key_insert(&mut conn, &self.sql, insert)
                .await
                .map_err(|err| self.error(err))?;
            if inserted {
                return Ok(KeyClaim::Run {
                    attempt: Attempt::new(1, token),
                });
            }
            if let Some(claimed) = self
                .settle(&mut conn, scope, key, fingerprint, Some(lease_ms))
                .await?
            {
                return Ok(claimed);
            }
        }
        Ok(KeyClaim::InFlight { retry_after: lease })
    }

    /// Stores `response` on a connection of its own ("plain mode").
    async fn complete(
        &self,
        scope: &Scope,
        key: &IdempotencyKey,
        attempt: Attempt,
        response: &StoredResponse,
    ) -> Result<Completed, Error> {
        let mut conn = self.pool.acquire().await?;
        self.complete_in(&mut conn, scope, key, attempt, response)
            .await
    }

    /// Forgets the key if `attempt` still holds it and no response is stored, so that a retry
    /// runs again. `true` when a row went (`false`: another attempt holds the key now, or a
    /// response is stored).
    async fn release(
        &self,
        scope: &Scope,
        key: &IdempotencyKey,
        attempt: Attempt,
    ) -> Result<bool, Error> {
        let key = &*self.key_at_rest(key);
        let mut conn = self.pool.acquire().await?;
        let release = release(Key::of(scope, key), attempt.token() as i64);
        let gone = DB::run(&mut conn, &*self.sql, release)
            .await
            .map_err(|err| self.error(err))?;
        Ok(gone == 1)
    }

    async fn usage(&self, scope: &Scope) -> Result<Option<ScopeUsage>, Error> {
        SqlKeyStore::usage(self, scope).await.map(Some)
    }

    /// On PostgreSQL, marks the key waited on and listens for its answer's notification.
    async fn in_flight_ended(&self, scope: &Scope, key: &IdempotencyKey) {
        self.answered_elsewhere(scope, key).await;
    }

    /// Forgets the process holding the attempt: its key waits for the lease even if the
    /// process dies now.
    async fn keep_for_lease(
        &self,
        scope: &Scope,
        key: &IdempotencyKey,
        attempt: Attempt,
    ) -> Result<(), Error> {
        let key = &*self.key_at_rest(key);
        let mut conn = self.pool.acquire().await?;
        let unhold = unhold(Key::of(scope, key), attempt.token() as i64);
        DB::run(&mut conn, &*self.sql, unhold)
            .await
            .map_err(|err| self.error(err))?;
        Ok(())
    }
}
