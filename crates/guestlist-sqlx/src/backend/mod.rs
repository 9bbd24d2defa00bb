//! Database differences, kept behind one sealed trait with an implementation per database.
//!
//! Everything that differs between PostgreSQL, SQLite and MySQL (SQL text, how a duplicate is
//! reported, which errors are worth a retry, how purgers take turns) lives in these files; the
//! inbox itself is written once, generically.

use std::future::Future;

pub(crate) use relay::{Held, Pending, PendingRow, RelaySql, Stamp};
use sqlx::{Database, Pool, Transaction};
pub(crate) use statement::Codec;
use statement::{Args, Bound, Plain, prepared};
// Named by the sealed traits, so `pub`; unreachable outside the crate.
#[allow(unreachable_pub)]
pub use wake::Wake;

/// A database guestlist can keep its guest list in: [`sqlx::Postgres`], [`sqlx::Sqlite`] or
/// [`sqlx::MySql`], each behind the feature of the same name.
///
/// The trait is sealed: its SQL is guestlist's own business. It is also the bound generic code
/// needs to run its own queries on the connection the inbox hands it: pass
/// [`DB::executor(tx)`](Backend::executor) where sqlx wants an executor, and bound each type you
/// bind or read with `for<'q> T: sqlx::Encode<'q, DB> + sqlx::Type<DB>` (or `sqlx::Decode`).
///
/// ```
/// use guestlist_sqlx::Backend;
///
/// /// Records a pick task on PostgreSQL, SQLite or MySQL alike.
/// async fn pick<DB: Backend>(tx: &mut DB::Connection, order: i64) -> Result<u64, sqlx::Error>
/// where
///     for<'q> i64: sqlx::Encode<'q, DB> + sqlx::Type<DB>,
/// {
///     // PostgreSQL numbers its placeholders; SQLite and MySQL take `?`.
///     let sql = if DB::NAME == "PostgreSQL" {
///         "INSERT INTO pick_tasks (order_id) VALUES ($1)"
///     } else {
///         "INSERT INTO pick_tasks (order_id) VALUES (?)"
///     };
///     let done = sqlx::query::<DB>(sql).bind(order).execute(DB::executor(tx)).await?;
///     Ok(DB::rows_affected(&done))
/// }
/// ```
pub trait Backend:
    sealed::Statements
    + sealed::KeyStatements
    + sealed::OutboxStatements
    + relay::RelayStatements
    + history::HistoryStatements
    + steps::StepsStatements
    + Database<Arguments: sqlx::IntoArguments<Self>>
{
    /// The connection as an executor sqlx runs queries on: `&mut` the connection.
    type Executor<'c>: sqlx::Executor<'c, Database = Self>;

    /// `conn` as an executor, for generic code: `query.execute(DB::executor(&mut *tx))`.
    fn executor(conn: &mut Self::Connection) -> Self::Executor<'_>;

    /// The rows a statement changed, which each database reports in a type of its own.
    fn rows_affected(done: &Self::QueryResult) -> u64;
}

/// Implements [`Backend`] for a database whose connection type is `$conn`.
#[cfg(any(feature = "postgres", feature = "sqlite", feature = "mysql"))]
macro_rules! backend {
    ($db:ty, $conn:ty) => {
        impl $crate::backend::Backend for $db {
            type Executor<'c> = &'c mut $conn;

            fn executor(conn: &mut $conn) -> &mut $conn {
                conn
            }

            fn rows_affected(done: &Self::QueryResult) -> u64 {
                done.rows_affected()
            }
        }

        $crate::backend::statement::codec!($db);
    };
}

mod classify;
pub(crate) mod history;
pub(crate) mod inbox;
pub(crate) mod inbox_dead;
pub(crate) mod keys;
#[cfg(feature = "mysql")]
mod mysql;
pub(crate) mod outbox;
#[cfg(feature = "postgres")]
mod postgres;
pub(crate) mod relay;
#[cfg(feature = "sqlite")]
pub(crate) mod sqlite;
pub(crate) mod statement;
pub(crate) mod steps;
pub(crate) mod table;
mod wake;

pub(crate) use classify::{
    driver_error, is_retryable, is_retryable_db, is_retryable_driver_error, is_unavailable,
};
// Named by the sealed traits, so `pub`; unreachable outside the crate.
#[allow(unreachable_pub)]
pub use inbox::InboxSql;
#[allow(unreachable_pub)]
pub use keys::{KeyRow, KeysSql};
#[allow(unreachable_pub)]
pub use outbox::{OutboxRow, OutboxSql};
#[allow(unreachable_pub)]
pub use table::TableSql;

/// The sealed per-database halves of the inbox, the key store and the outbox: implemented in
/// this crate for the three backends only.
pub(crate) mod sealed {
    use super::*;

    /// The per-database half of the inbox. Sealed: implemented here for the three backends only.
    #[allow(unreachable_pub)]
    pub trait Statements: Codec {
        /// The backend's name in logs, metrics and errors.
        const BACKEND: &'static str;
        /// The DDL file for the inbox table.
        const INBOX_DDL: &'static str;
        /// One writer at a time for the whole database (SQLite): a purge must leave gaps as
        /// long as its batches, or waiting writers, which poll, may never find the lock free.
        const SINGLE_WRITER: bool = false;
        /// Rows per purge batch unless set (see [`crate::Purge::DEFAULT_BATCH_SIZE`]).
        const PURGE_BATCH_SIZE: u32 = 1_000;
        /// Run once on the purge's own session before its batches (empty: nothing).
        const PURGE_SESSION: &'static str = "";
        /// Template of [`InboxSql::claim`].
        const CLAIM: &'static str;
        /// Template of [`InboxSql::claim_batch`].
        const CLAIM_BATCH: &'static str;
        /// Template of [`InboxSql::defer`], on the table `{table}_deferrals`.
        const DEFER: &'static str;
        /// Template of [`InboxSql::deferrals`]: the count and the first deferral's time.
        const DEFERRALS: &'static str;
        /// Template of [`InboxSql::forget_deferrals`].
        const FORGET_DEFERRALS: &'static str;
        /// Template of [`inbox_dead::DeadSql::record`], on the table `{table}_dead`: handler, id,
        /// reason, deliveries, Unix ms, topic, key, headers, body; a message dead-lettered again
        /// replaces its row, dead again.
        const RECORD_DEAD: &'static str;
        /// Template of [`TableSql::purge_batch`], with `{table}`, the time column `{at}` and, where
        /// the database locks rows before deleting them, `{skip_locked}` (see `Rows`).
        const PURGE_BATCH: &'static str;
        /// Template of [`TableSql::count_older`], with `{table}` and the time column `{at}`.
        const COUNT_OLDER: &'static str;
        /// Template of [`TableSql::size`]: the table's bytes, its indexes' bytes, its dead rows
        /// and its free bytes, each `NULL` where the database does not report it.
        const TABLE_SIZE: &'static str;
        /// Template of [`InboxSql::handlers`]: handler, rows, the oldest row's age in
        /// milliseconds, in the handlers' order.
        const INBOX_HANDLERS: &'static str;

        /// Begins a transaction that is about to write first (SQLite: `BEGIN IMMEDIATE`).
        fn begin(
            pool: &Pool<Self>,
        ) -> impl Future<Output = Result<Transaction<'static, Self>, sqlx::Error>> + Send {
            pool.begin()
        }

        /// `true` when a claim's insert added its row: one row changed. A database that reports
        /// a duplicate as an error instead (MySQL, where `INSERT IGNORE` would hide other errors)
        /// says so here.
        fn inserted(changed: Result<u64, sqlx::Error>) -> Result<bool, sqlx::Error> {
            Ok(changed? == 1)
        }

        /// Inserts one claim; `true` when this transaction inserted the row.
        fn claim<'c>(
            conn: &'c mut Self::Connection,
            sql: &'c InboxSql,
            handler: &'c str,
            id: &'c str,
        ) -> impl Future<Output = Result<bool, sqlx::Error>> + Send + 'c {
            let claim = Plain::new(|sql: &InboxSql| &sql.claim, (handler, id));
            let claim = Self::run(conn, sql, claim);
            async move { Self::inserted(claim.await) }
        }

        /// Binds a batch's ids as one value: an array, or JSON text. A database that cannot
        /// (MySQL, which claims a batch one id at a time) refuses rather than bind nothing.
        fn bind_ids<'q>(
            query: Bound<'q, Self>,
            ids: &[&str],
        ) -> Result<Bound<'q, Self>, sqlx::Error> {
            let _ = (query, ids);
            Err(sqlx::Error::Protocol(format!(
                "{} binds no list of ids: claim the batch one id at a time",
                Self::BACKEND
            )))
        }

        /// Inserts claims for `ids`, sorted and distinct; returns the ones this transaction
        /// inserted. Written for one statement that inserts them all and returns the new ids.
        fn claim_batch<'c>(
            conn: &'c mut Self::Connection,
            sql: &'c InboxSql,
            handler: &'c str,
            ids: &'c [&'c str],
        ) -> impl Future<Output = Result<Vec<String>, sqlx::Error>> + Send + 'c {
            async move {
                let query = Self::bind_ids(prepared(&sql.claim_batch).arg(handler), ids)?;
                let rows = Self::fetch_query(conn, query).await?;
                rows.iter().map(|row| Self::get_string(row, 0)).collect()
            }
        }

        /// Counts one deferral of a message; returns its deferrals so far and the first one's
        /// time (Unix milliseconds), `now_ms` when this is the first. Written for an upsert
        /// that returns the row (`ON CONFLICT … DO UPDATE … RETURNING`).
        fn defer<'c>(
            conn: &'c mut Self::Connection,
            sql: &'c InboxSql,
            defer: inbox::Defer<'c>,
        ) -> impl Future<Output = Result<inbox::DeferralsRow, sqlx::Error>> + Send + 'c {
            let now_ms = defer.now_ms;
            let row = Self::fetch_first(conn, sql, defer);
            async move {
                let row = row.await?;
                Ok(row.unwrap_or_else(|| inbox::DeferralsRow::first(now_ms)))
            }
        }

        /// Deletes at most `limit` rows older than `older_than_secs`, oldest first, and none
        /// older than `after_micros` (Unix microseconds) when given. Returns how many went and,
        /// where the backend resumes batches, the newest deleted row's time to pass as
        /// `after_micros` next. Written for the backends that start from the oldest row each
        /// time: where a delete leaves nothing behind in the index for the next batch to step
        /// over (SQLite), or until measured otherwise (MySQL).
        fn purge_batch<'c>(
            conn: &'c mut Self::Connection,
            sql: &'c TableSql,
            older_than_secs: i64,
            limit: i64,
            _after_micros: Option<i64>,
        ) -> impl Future<Output = Result<(u64, Option<i64>), sqlx::Error>> + Send + 'c {
            let purge = Plain::new(|sql: &TableSql| &sql.purge_batch, (older_than_secs, limit));
            let deleted = Self::run(conn, sql, purge);
            async move { Ok((deleted.await?, None)) }
        }

        /// Runs `ddl` holding the lock named `lock`, so that processes migrating at once take
        /// turns: concurrent `CREATE … IF NOT EXISTS` can still collide in the catalog.
        fn migrate<'c>(
            conn: &'c mut Self::Connection,
            lock: &'c str,
            ddl: &'c [String],
        ) -> impl Future<Output = Result<(), sqlx::Error>> + Send + 'c;

        /// Tries to take the session lock named `name` without waiting: `true` when taken.
        /// Backends without such locks answer `true`.
        fn try_lock<'c>(
            conn: &'c mut Self::Connection,
            name: &'c str,
        ) -> impl Future<Output = Result<bool, sqlx::Error>> + Send + 'c;

        /// Releases a lock taken with [`Statements::try_lock`].
        fn unlock<'c>(
            conn: &'c mut Self::Connection,
            name: &'c str,
        ) -> impl Future<Output = Result<(), sqlx::Error>> + Send + 'c;

        /// `true` when `err` says the table does not exist.
        fn is_missing_table(err: &sqlx::Error) -> bool;

        /// `true` when a write failed because the transaction had to take the write lock late
        /// and another writer held it: a deferred SQLite transaction that had read first.
        fn is_late_write_lock(_err: &sqlx::Error) -> bool {
            false
        }
    }

    /// The per-database half of the outbox. Sealed: implemented here for the three backends.
    #[allow(unreachable_pub)]
    pub trait OutboxStatements: Statements {
        /// The outbox's DDL file, written for the table `guestlist_outbox`.
        const OUTBOX_DDL: &'static str;
        /// Template of [`OutboxSql::next_seq`].
        const OUTBOX_NEXT_SEQ: &'static str;
        /// Template of [`OutboxSql::read_seq`].
        const OUTBOX_READ_SEQ: &'static str = "";
        /// Template of [`OutboxSql::insert`].
        const OUTBOX_INSERT: &'static str;
        /// Template of [`OutboxSql::give_back_seq`]: key, seq.
        const OUTBOX_GIVE_BACK_SEQ: &'static str;

        /// Takes `key`'s next seq, locking its row until the transaction ends. Written for an
        /// upsert that returns it.
        fn outbox_next_seq<'c>(
            conn: &'c mut Self::Connection,
            sql: &'c OutboxSql,
            key: &'c str,
        ) -> impl Future<Output = Result<i64, sqlx::Error>> + Send + 'c {
            let seq = Self::fetch_one(conn, sql, Plain::reading(outbox::next_seq, (key,)));
            async move {
                let (seq,): (i64,) = seq.await?;
                Ok(seq)
            }
        }

        /// Gives back the seq `seq` of `key` that this transaction took for a message already
        /// there, so that the key's seqs stay without gaps; the key's row is still locked by the
        /// transaction, so no later seq was taken.
        fn outbox_give_back_seq<'c>(
            conn: &'c mut Self::Connection,
            sql: &'c OutboxSql,
            key: &'c str,
            seq: i64,
        ) -> impl Future<Output = Result<u64, sqlx::Error>> + Send + 'c {
            Self::run(conn, sql, Plain::new(outbox::give_back_seq, (key, seq)))
        }

        /// Inserts a message unless its id is there; `true` when new.
        fn outbox_insert<'c>(
            conn: &'c mut Self::Connection,
            sql: &'c OutboxSql,
            row: OutboxRow<'c>,
        ) -> impl Future<Output = Result<bool, sqlx::Error>> + Send + 'c {
            let insert = Self::run(conn, sql, row);
            async move { Self::inserted(insert.await) }
        }
    }

    /// The per-database half of the idempotency-key store. Sealed: implemented here for the
    /// three backends.
    #[allow(unreachable_pub)]
    pub trait KeyStatements: Statements {
        /// The DDL file for the key table.
        const KEYS_DDL: &'static str;
        /// Template of [`KeysSql::insert`]: scope, key, fingerprint, token, lease in milliseconds,
        /// holder.
        const KEY_INSERT: &'static str;
        /// Template of [`KeysSql::select`]: scope, key.
        const KEY_SELECT: &'static str;
        /// Template of [`KeysSql::take_over`]: new token, lease in milliseconds, scope, key, the
        /// token read.
        const KEY_TAKE_OVER: &'static str;
        /// Template of [`KeysSql::complete`]: status, headers, body, scope, key, token.
        const KEY_COMPLETE: &'static str;
        /// Template of [`KeysSql::release`]: scope, key, token.
        const KEY_RELEASE: &'static str;
        /// Template of [`KeysSql::evict`]: scope, key.
        const KEY_EVICT: &'static str;
        /// Template of [`KeysSql::stats`]: rows, rows in flight, the oldest row's age in
        /// milliseconds, and the table's size in bytes (SQLite: the database file's).
        const KEY_STATS: &'static str;
        /// Template of [`KeysSql::usage`]: one scope's keys in flight, and in all.
        const KEY_USAGE: &'static str;
        /// Template of [`KeysSql::in_flight`]: the keys without a response (scope, key,
        /// attempt, lease left and age in milliseconds), newest first, at most $1.
        const KEY_IN_FLIGHT: &'static str;
        /// Template of [`KeysSql::claim_locked`]: scope, key, fingerprint, token, lease in
        /// milliseconds; reads (lock held, row inserted, the key's row). Empty where the
        /// database has no transaction-scoped lock to try: its claims cannot be written on the
        /// handler's transaction ([`crate::SqlKeyStore::claims_on_transaction`]).
        const KEY_CLAIM_LOCKED: &'static str = "";
        /// Template of [`KeysSql::hold_lock`]: scope, key. Empty where
        /// [`KeyStatements::KEY_CLAIM_LOCKED`] is.
        const KEY_HOLD_LOCK: &'static str = "";
        /// Template of [`KeysSql::let_go_lock`]: scope, key. Empty where
        /// [`KeyStatements::KEY_CLAIM_LOCKED`] is.
        const KEY_LET_GO_LOCK: &'static str = "";
        /// Template of [`KeysSql::cut_lease`]: scope, key, the token read.
        const KEY_CUT_LEASE: &'static str;
        /// Template of [`KeysSql::unhold`]: scope, key, token.
        const KEY_UNHOLD: &'static str;
        /// Template of [`KeysSql::mark_waited`]: scope, key; 1 row while the key is in flight.
        /// Empty where nothing notifies: requests waiting on a key poll it.
        const KEY_MARK_WAITED: &'static str = "";
        /// Template of [`KeysSql::holder_lock`]: the holder's number; reads 1 once held. Empty
        /// where the database ends no lock with a session: a crashed attempt's key then waits
        /// for its lease.
        const KEY_HOLDER_LOCK: &'static str = "";
        /// Template of [`KeysSql::holder_alive`]: the holder's number; reads 1 while some
        /// session holds its lock. Empty where [`KeyStatements::KEY_HOLDER_LOCK`] is.
        const KEY_HOLDER_ALIVE: &'static str = "";

        /// Inserts an in-flight key; `true` when new.
        fn key_insert<'c>(
            conn: &'c mut Self::Connection,
            sql: &'c KeysSql,
            insert: keys::Insert<'c>,
        ) -> impl Future<Output = Result<bool, sqlx::Error>> + Send + 'c {
            let insert = Self::run(conn, sql, insert);
            async move { Self::inserted(insert.await) }
        }
    }
}
