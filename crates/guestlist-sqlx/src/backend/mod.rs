//! Database differences, kept behind one sealed trait with an implementation per database.
//!
//! Everything that differs between PostgreSQL, SQLite and MySQL (SQL text, how a duplicate is
//! reported, which errors are worth a retry, how purgers take turns) lives in these files; the
//! inbox itself is written once, generically.

use std::future::Future;
use std::sync::Arc;

pub(crate) use relay::{PendingRow, RelaySql};
use sqlx::{Database, Pool, Transaction};

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
    };
}

mod classify;
mod inbox;
mod keys;
#[cfg(feature = "mysql")]
mod mysql;
mod outbox;
#[cfg(feature = "postgres")]
mod postgres;
pub(crate) mod relay;
#[cfg(feature = "sqlite")]
pub(crate) mod sqlite;
mod table;

pub(crate) use classify::{
    driver_error, is_retryable, is_retryable_db, is_retryable_driver_error, is_unavailable,
};
// Named by the sealed traits, so `pub`; unreachable outside the crate.
#[allow(unreachable_pub)]
pub use inbox::{HandlerRow, InboxSql};
#[allow(unreachable_pub)]
pub use keys::{KeyRow, KeyStatsRow, KeysSql};
#[allow(unreachable_pub)]
pub use outbox::{OutboxRow, OutboxSql};
#[allow(unreachable_pub)]
pub use table::{SizeRow, TableSql};

/// The sealed per-database halves of the inbox, the key store and the outbox: implemented in
/// this crate for the three backends only.
pub(crate) mod sealed {
    use super::*;

    /// The per-database half of the inbox. Sealed: implemented here for the three backends only.
    #[allow(unreachable_pub)]
    pub trait Statements: Database {
        /// The backend's name in logs, metrics and errors.
        const BACKEND: &'static str;
        /// The DDL file for the inbox table.
        const INBOX_DDL: &'static str;
        /// One writer at a time for the whole database (SQLite): a purge must leave gaps as
        /// long as its batches, or waiting writers, which poll, may never find the lock free.
        const SINGLE_WRITER: bool = false;
        /// Rows per purge batch unless set (see [`crate::Purge::DEFAULT_BATCH_SIZE`]).
        const PURGE_BATCH_SIZE: u32 = 1_000;
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
        /// Template of [`TableSql::purge_batch`], with `{table}` and the time column `{at}`.
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

        /// Inserts one claim; `true` when this transaction inserted the row.
        fn claim<'c>(
            conn: &'c mut Self::Connection,
            sql: &'c InboxSql,
            handler: &'c str,
            id: &'c str,
        ) -> impl Future<Output = Result<bool, sqlx::Error>> + Send + 'c;

        /// Inserts claims for `ids`, sorted and distinct; returns the ones this transaction inserted.
        fn claim_batch<'c>(
            conn: &'c mut Self::Connection,
            sql: &'c InboxSql,
            handler: &'c str,
            ids: &'c [&'c str],
        ) -> impl Future<Output = Result<Vec<String>, sqlx::Error>> + Send + 'c;

        /// Counts one deferral of a message; returns its deferrals so far and the first one's
        /// time (Unix milliseconds), `now_ms` when this is the first.
        fn defer<'c>(
            conn: &'c mut Self::Connection,
            sql: &'c InboxSql,
            handler: &'c str,
            id: &'c str,
            now_ms: i64,
        ) -> impl Future<Output = Result<(i64, i64), sqlx::Error>> + Send + 'c;

        /// A message's deferrals and the first one's time, if it has any.
        fn deferrals<'c>(
            conn: &'c mut Self::Connection,
            sql: &'c InboxSql,
            handler: &'c str,
            id: &'c str,
        ) -> impl Future<Output = Result<Option<(i64, i64)>, sqlx::Error>> + Send + 'c;

        /// Forgets a message's deferrals.
        fn forget_deferrals<'c>(
            conn: &'c mut Self::Connection,
            sql: &'c InboxSql,
            handler: &'c str,
            id: &'c str,
        ) -> impl Future<Output = Result<(), sqlx::Error>> + Send + 'c;

        /// Deletes at most `limit` rows older than `older_than_secs`, oldest first, and none
        /// older than `after_micros` (Unix microseconds) when given. Returns how many went and,
        /// where the backend resumes batches, the newest deleted row's time to pass as
        /// `after_micros` next.
        fn purge_batch<'c>(
            conn: &'c mut Self::Connection,
            sql: &'c TableSql,
            older_than_secs: i64,
            limit: i64,
            after_micros: Option<i64>,
        ) -> impl Future<Output = Result<(u64, Option<i64>), sqlx::Error>> + Send + 'c;

        /// Counts rows older than `older_than_secs`.
        fn count_older<'c>(
            conn: &'c mut Self::Connection,
            sql: &'c TableSql,
            older_than_secs: i64,
        ) -> impl Future<Output = Result<u64, sqlx::Error>> + Send + 'c;

        /// Reads [`TableSql::size`].
        fn table_size<'c>(
            conn: &'c mut Self::Connection,
            sql: &'c TableSql,
        ) -> impl Future<Output = Result<SizeRow, sqlx::Error>> + Send + 'c;

        /// Reads [`InboxSql::handlers`].
        fn inbox_handlers<'c>(
            conn: &'c mut Self::Connection,
            sql: &'c InboxSql,
        ) -> impl Future<Output = Result<Vec<HandlerRow>, sqlx::Error>> + Send + 'c;

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

    /// The per-database half of the idempotency-key store.
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

        /// Takes `key`'s next seq, locking its row until the transaction ends.
        fn outbox_next_seq<'c>(
            conn: &'c mut Self::Connection,
            sql: &'c OutboxSql,
            key: &'c str,
        ) -> impl Future<Output = Result<i64, sqlx::Error>> + Send + 'c;

        /// Inserts a message unless its id is there; `true` when new.
        fn outbox_insert<'c>(
            conn: &'c mut Self::Connection,
            sql: &'c OutboxSql,
            row: OutboxRow<'c>,
        ) -> impl Future<Output = Result<bool, sqlx::Error>> + Send + 'c;
    }

    #[allow(unreachable_pub)]
    pub trait KeyStatements: Statements {
        /// The DDL file for the key table.
        const KEYS_DDL: &'static str;
        /// Template of [`KeysSql::insert`]: scope, key, fingerprint, token, lease in milliseconds.
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
        /// Template of [`KeysSql::claim_locked`]: scope, key, fingerprint, token, lease in
        /// milliseconds; reads (lock held, row inserted). Empty where the database has no
        /// transaction-scoped lock to try.
        const KEY_CLAIM_LOCKED: &'static str = "";

        /// Inserts an in-flight key; `true` when new.
        fn key_insert<'c>(
            conn: &'c mut Self::Connection,
            sql: &'c KeysSql,
            scope: &'c str,
            key: &'c str,
            fingerprint: &'c [u8],
            token: i64,
            lease_ms: i64,
        ) -> impl Future<Output = Result<bool, sqlx::Error>> + Send + 'c;

        /// Reads a key's row.
        fn key_select<'c>(
            conn: &'c mut Self::Connection,
            sql: &'c KeysSql,
            scope: &'c str,
            key: &'c str,
        ) -> impl Future<Output = Result<Option<KeyRow>, sqlx::Error>> + Send + 'c;

        /// Reads the table's figures.
        fn key_stats<'c>(
            conn: &'c mut Self::Connection,
            sql: &'c KeysSql,
        ) -> impl Future<Output = Result<KeyStatsRow, sqlx::Error>> + Send + 'c;

        /// Counts one scope's keys in flight, and in all.
        fn key_usage<'c>(
            conn: &'c mut Self::Connection,
            sql: &'c KeysSql,
            scope: &'c str,
        ) -> impl Future<Output = Result<(i64, i64), sqlx::Error>> + Send + 'c;

        /// Runs a statement that binds, in order, the given values and reports rows affected:
        /// take-over, complete, release and evict share it.
        fn key_update<'c>(
            conn: &'c mut Self::Connection,
            statement: &'c Arc<str>,
            values: KeyValues<'c>,
        ) -> impl Future<Output = Result<u64, sqlx::Error>> + Send + 'c;
    }

    /// The values [`KeyStatements::key_update`] binds, in the order the statement names them.
    #[derive(Debug)]
    #[allow(unreachable_pub)]
    pub enum KeyValues<'a> {
        /// New token, lease (ms), scope, key, the token read.
        TakeOver(i64, i64, &'a str, &'a str, i64),
        /// Status, headers, body, scope, key, token.
        Complete(i32, &'a [u8], Option<&'a [u8]>, &'a str, &'a str, i64),
        /// Scope, key, token.
        Release(&'a str, &'a str, i64),
        /// Scope, key.
        Evict(&'a str, &'a str),
    }
}
