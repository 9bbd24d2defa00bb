//! The idempotency-key table's SQL: its text, formatted once per table, and its statements as
//! typed values.

use std::sync::Arc;

use guestlist_core::{IdempotencyKey, Scope, TableName};

use super::statement::{Args, Bound, Codec, Columns, Plain, Statement, Value, row};
use super::table::{Rows, filler};
use super::{TableSql, sealed};

/// SQL text for one idempotency-key table, formatted once when the store is built.
#[derive(Debug)]
#[allow(unreachable_pub)] // named by the sealed traits, unreachable outside the crate
pub struct KeysSql {
    pub(crate) common: Arc<TableSql>,
    /// Inserts an in-flight row with a lease; reports 1 row when new.
    pub(crate) insert: Arc<str>,
    /// Reads a row, with the lease's remaining milliseconds by the database's clock.
    pub(crate) select: Arc<str>,
    /// Takes over an expired lease by compare-and-set on the attempt.
    pub(crate) take_over: Arc<str>,
    /// Stores the response if the attempt still holds the key.
    pub(crate) complete: Arc<str>,
    /// Deletes an in-flight row if the attempt still holds it.
    pub(crate) release: Arc<str>,
    /// Deletes a row whatever its state (an operator's eviction).
    pub(crate) evict: Arc<str>,
    /// The table's figures, for operators.
    pub(crate) stats: Arc<str>,
    /// One scope's keys in flight and in all: scope.
    pub(crate) usage: Arc<str>,
    /// The keys without a response, newest first: how many at most.
    pub(crate) in_flight: Arc<str>,
    /// Claims a key on the caller's transaction behind a transaction-scoped lock (PostgreSQL's
    /// advisory lock; empty where the database has none).
    pub(crate) claim_locked: Arc<str>,
    /// Takes the lock of [`KeysSql::claim_locked`] for the session, so that it outlasts the
    /// transaction (empty where the database has none).
    pub(crate) hold_lock: Arc<str>,
    /// Lets the session's lock go.
    pub(crate) let_go_lock: Arc<str>,
    /// Ends the lease of an attempt whose holder is gone, by compare-and-set on its token.
    pub(crate) cut_lease: Arc<str>,
    /// Forgets an attempt's holder, so that its key waits for the lease even if the holder dies.
    pub(crate) unhold: Arc<str>,
    /// Marks an in-flight key waited on, so that its answer or release notifies (empty where
    /// nothing notifies).
    pub(crate) mark_waited: Arc<str>,
    /// Takes a holder's session lock: what tells other processes that its attempts are alive
    /// (empty where the database has none).
    pub(crate) holder_lock: Arc<str>,
    /// Whether a holder's session lock is held, by any session.
    pub(crate) holder_alive: Arc<str>,
}

impl KeysSql {
    pub(crate) fn new<DB: sealed::KeyStatements>(table: &TableName) -> Self {
        let fill = filler(table);
        Self {
            common: Arc::new(TableSql::new::<DB>(
                table,
                "created_at",
                Rows::Rewritten,
                DB::KEYS_DDL,
                "guestlist_keys",
            )),
            insert: fill(DB::KEY_INSERT),
            select: fill(DB::KEY_SELECT),
            take_over: fill(DB::KEY_TAKE_OVER),
            complete: fill(DB::KEY_COMPLETE),
            release: fill(DB::KEY_RELEASE),
            evict: fill(DB::KEY_EVICT),
            stats: fill(DB::KEY_STATS),
            usage: fill(DB::KEY_USAGE),
            in_flight: fill(DB::KEY_IN_FLIGHT),
            claim_locked: fill(DB::KEY_CLAIM_LOCKED),
            hold_lock: fill(DB::KEY_HOLD_LOCK),
            let_go_lock: fill(DB::KEY_LET_GO_LOCK),
            cut_lease: fill(DB::KEY_CUT_LEASE),
            unhold: fill(DB::KEY_UNHOLD),
            mark_waited: fill(DB::KEY_MARK_WAITED),
            holder_lock: fill(DB::KEY_HOLDER_LOCK),
            holder_alive: fill(DB::KEY_HOLDER_ALIVE),
        }
    }
}

/// A key's row as read back.
#[derive(Debug)]
#[allow(unreachable_pub)] // named by the sealed traits, unreachable outside the crate
pub struct KeyRow {
    pub(crate) fingerprint: Vec<u8>,
    pub(crate) status: Option<i32>,
    pub(crate) headers: Option<Vec<u8>>,
    pub(crate) body: Option<Vec<u8>>,
    pub(crate) attempt: i64,
    /// The fencing token of the attempt that holds the key.
    pub(crate) token: i64,
    /// Milliseconds the lease has left (negative once expired; `None` once completed).
    pub(crate) lease_left_ms: Option<i64>,
    /// The process holding the attempt ([`crate::keys::Holder`]), where one can be told gone.
    pub(crate) holder: Option<i64>,
}

row! {
    /// The key table's figures as read.
    pub(crate) struct KeyStatsRow {
        rows: i64,
        in_flight: i64,
        /// The oldest row's age in milliseconds.
        oldest_ms: Option<i64>,
        /// The table's size in bytes, where the database tells.
        bytes: Option<i64>,
    }
}

row! {
    /// A key without a response as [`KeysSql::in_flight`] reads it.
    pub(crate) struct HeldKeyRow {
        scope: String,
        key: String,
        attempt: i64,
        /// Milliseconds its lease has left (negative once expired).
        lease_left_ms: Option<i64>,
        /// Its age in milliseconds.
        age_ms: Option<i64>,
    }
}

row! {
    /// What one scope holds as [`KeysSql::usage`] reads it.
    pub(crate) struct UsageRow {
        in_flight: i64,
        keys: i64,
    }
}

impl Columns for KeyRow {
    fn read<DB: Codec>(row: &DB::Row) -> Result<Self, sqlx::Error> {
        Ok(Self {
            fingerprint: DB::get(row, 0)?,
            status: DB::get(row, 1)?,
            headers: DB::get(row, 2)?,
            body: DB::get(row, 3)?,
            attempt: DB::get(row, 4)?,
            token: DB::get(row, 5)?,
            lease_left_ms: DB::get(row, 6)?,
            holder: DB::get(row, 7)?,
        })
    }
}

/// A key: its scope and the key itself, the two columns every key statement finds it by.
#[derive(Clone, Copy)]
#[allow(unreachable_pub)] // named by the sealed traits, unreachable outside the crate
pub struct Key<'a> {
    pub(crate) scope: &'a str,
    pub(crate) key: &'a str,
}

impl Value for Key<'_> {
    fn bind<'q, DB: Codec>(self, query: Bound<'q, DB>) -> Bound<'q, DB> {
        query.arg(self.scope).arg(self.key)
    }
}

/// Reads a key's row.
pub(crate) fn select(key: Key<'_>) -> Plain<KeysSql, (Key<'_>,), KeyRow> {
    Plain::reading(|sql| &sql.select, (key,))
}

/// Deletes an in-flight key if the attempt with `token` still holds it.
pub(crate) fn release(key: Key<'_>, token: i64) -> Plain<KeysSql, (Key<'_>, i64)> {
    Plain::new(|sql| &sql.release, (key, token))
}

/// Takes a key's lock for the session (PostgreSQL's advisory lock).
pub(crate) fn hold_lock(key: Key<'_>) -> Plain<KeysSql, (Key<'_>,)> {
    Plain::new(|sql| &sql.hold_lock, (key,))
}

/// Ends the lease of the attempt with `token`, whose holder is gone.
pub(crate) fn cut_lease(key: Key<'_>, token: i64) -> Plain<KeysSql, (Key<'_>, i64)> {
    Plain::new(|sql| &sql.cut_lease, (key, token))
}

/// Forgets the holder of the attempt with `token`: its key waits for the lease.
pub(crate) fn unhold(key: Key<'_>, token: i64) -> Plain<KeysSql, (Key<'_>, i64)> {
    Plain::new(|sql| &sql.unhold, (key, token))
}

/// Marks an in-flight key waited on.
pub(crate) fn mark_waited(key: Key<'_>) -> Plain<KeysSql, (Key<'_>,)> {
    Plain::new(|sql| &sql.mark_waited, (key,))
}

/// Lets the session's lock of a key go.
pub(crate) fn let_go_lock(key: Key<'_>) -> Plain<KeysSql, (Key<'_>,)> {
    Plain::new(|sql| &sql.let_go_lock, (key,))
}

/// Deletes a key whatever its state: an operator's eviction.
pub(crate) fn evict(key: Key<'_>) -> Plain<KeysSql, (Key<'_>,)> {
    Plain::new(|sql| &sql.evict, (key,))
}

impl<'a> Key<'a> {
    /// The key `key` in `scope`, as stored.
    pub(crate) fn of(scope: &'a Scope, key: &'a IdempotencyKey) -> Self {
        Self {
            scope: scope.as_str(),
            key: key.as_str(),
        }
    }
}

/// Inserts an in-flight key with a lease: the key, its fingerprint, the attempt's token, the
/// lease in milliseconds, and the process holding the attempt (if it can be told gone).
#[derive(Clone, Copy)]
#[allow(unreachable_pub)] // named by the sealed traits, unreachable outside the crate
pub struct Insert<'a> {
    pub(crate) key: Key<'a>,
    pub(crate) fingerprint: &'a [u8],
    pub(crate) token: i64,
    pub(crate) lease_ms: i64,
    pub(crate) holder: Option<i64>,
}

impl Statement for Insert<'_> {
    type Sql = KeysSql;
    type Row = ();
    fn text<'s>(&self, sql: &'s KeysSql) -> &'s Arc<str> {
        &sql.insert
    }
    fn bind<'q, DB: Codec>(self, query: Bound<'q, DB>) -> Bound<'q, DB> {
        let query = query.arg(self.key).arg(self.fingerprint);
        query.arg(self.token).arg(self.lease_ms).arg(self.holder)
    }
}

/// Takes over an expired lease: the new token and lease, the key, and the token read, which
/// must still hold it (compare-and-set).
pub(crate) struct TakeOver<'a> {
    pub(crate) token: i64,
    pub(crate) lease_ms: i64,
    pub(crate) key: Key<'a>,
    pub(crate) held: i64,
}

impl Statement for TakeOver<'_> {
    type Sql = KeysSql;
    type Row = ();
    fn text<'s>(&self, sql: &'s KeysSql) -> &'s Arc<str> {
        &sql.take_over
    }
    fn bind<'q, DB: Codec>(self, query: Bound<'q, DB>) -> Bound<'q, DB> {
        let query = query.arg(self.token).arg(self.lease_ms);
        query.arg(self.key).arg(self.held)
    }
}

/// Stores a response if the attempt with `token` still holds the key.
#[derive(Clone, Copy)]
#[allow(unreachable_pub)] // named by the sealed traits, unreachable outside the crate
pub struct Complete<'a> {
    pub(crate) status: i32,
    pub(crate) headers: &'a [u8],
    pub(crate) body: Option<&'a [u8]>,
    pub(crate) key: Key<'a>,
    pub(crate) token: i64,
}

impl Statement for Complete<'_> {
    type Sql = KeysSql;
    type Row = ();
    fn text<'s>(&self, sql: &'s KeysSql) -> &'s Arc<str> {
        &sql.complete
    }
    fn bind<'q, DB: Codec>(self, query: Bound<'q, DB>) -> Bound<'q, DB> {
        let query = query.arg(self.status).arg(self.headers).arg(self.body);
        query.arg(self.key).arg(self.token)
    }
}

/// Claims a key on the caller's transaction behind a transaction-scoped lock, with the same
/// values as an [`Insert`]: reads a [`LockedClaim`].
pub(crate) struct ClaimLocked<'a>(pub(crate) Insert<'a>);

impl Statement for ClaimLocked<'_> {
    type Sql = KeysSql;
    type Row = LockedClaim;
    fn text<'s>(&self, sql: &'s KeysSql) -> &'s Arc<str> {
        &sql.claim_locked
    }
    fn bind<'q, DB: Codec>(self, query: Bound<'q, DB>) -> Bound<'q, DB> {
        // No holder: the claim lives and dies with the transaction.
        let Insert {
            key,
            fingerprint,
            token,
            lease_ms,
            holder: _,
        } = self.0;
        query.arg(key).arg(fingerprint).arg(token).arg(lease_ms)
    }
}

/// What a locked claim answers: whether it holds the key's lock, and whether it inserted the
/// key's row.
pub(crate) struct LockedClaim {
    pub(crate) held: bool,
    pub(crate) inserted: bool,
}

impl Columns for LockedClaim {
    fn read<DB: Codec>(row: &DB::Row) -> Result<Self, sqlx::Error> {
        Ok(Self {
            held: DB::get(row, 0)?,
            inserted: DB::get(row, 1)?,
        })
    }
}

/// How a database writes one round of [`crate::BatchedKeyStore`]. Sealed: implemented for
/// PostgreSQL (one statement) and SQLite (one transaction from one writer).
#[cfg(any(feature = "postgres", feature = "sqlite"))]
#[allow(unreachable_pub)] // named by the sealed traits, unreachable outside the crate
pub trait WriteRound: super::Backend {
    /// Writes the claims (distinct keys, in key order) and the stored responses in one
    /// commit; the tokens of the rows inserted and of the rows completed.
    fn write_round<'a>(
        pool: &'a sqlx::Pool<Self>,
        sql: &'a KeysSql,
        claims: &'a [Insert<'a>],
        completes: &'a [Complete<'a>],
    ) -> impl std::future::Future<Output = Result<std::collections::HashSet<i64>, sqlx::Error>> + Send + 'a;
}
