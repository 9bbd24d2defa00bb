//! Database differences, kept behind one sealed trait with an implementation per database.
//!
//! Everything that differs between PostgreSQL, SQLite and MySQL (SQL text, how a duplicate is
//! reported, which errors are worth a retry, how purgers take turns) lives in these files; the
//! inbox itself is written once, generically.

use std::future::Future;
use std::sync::Arc;

use guestlist_core::TableName;
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

#[cfg(feature = "mysql")]
mod mysql;
#[cfg(feature = "postgres")]
mod postgres;
pub(crate) mod relay;
#[cfg(feature = "sqlite")]
pub(crate) mod sqlite;

/// SQL text every guestlist table needs: its name, its DDL, and its purge.
#[derive(Debug)]
#[allow(unreachable_pub)] // named by the sealed traits, unreachable outside the crate
pub struct TableSql {
    pub(crate) table: TableName,
    /// Deletes at most `limit` rows older than a number of seconds (PostgreSQL: and none older
    /// than a resume point).
    pub(crate) purge_batch: Arc<str>,
    /// Counts rows older than a number of seconds.
    pub(crate) count_older: Arc<str>,
    /// Reads the table's size: table bytes, index bytes, dead rows, free bytes.
    pub(crate) size: Arc<str>,
    /// The DDL, one statement per entry.
    pub(crate) ddl: Vec<String>,
}

impl TableSql {
    /// Formats `DB`'s purge templates for `table`, whose age is in the column `at`, and its DDL
    /// file, written for the table `default_name`.
    fn new<DB: sealed::Statements>(
        table: &TableName,
        at: &str,
        ddl: &str,
        default_name: &str,
    ) -> Self {
        let fill = |template: &str| -> Arc<str> {
            template
                .replace("{table}", table.as_str())
                .replace("{at}", at)
                .into()
        };
        Self {
            table: table.clone(),
            purge_batch: fill(DB::PURGE_BATCH),
            count_older: fill(DB::COUNT_OLDER),
            size: fill(DB::TABLE_SIZE),
            ddl: ddl_statements(ddl, default_name, table.as_str()),
        }
    }

    /// The name of the lock purgers of this table take turns with.
    pub(crate) fn purge_lock(&self) -> String {
        format!("guestlist_purge_{}", self.table)
    }

    /// The name of the lock migrations of this table take turns with.
    fn migrate_lock(&self) -> String {
        format!("guestlist_migrate_{}", self.table)
    }

    /// Runs the table's DDL on `conn`, after any other process migrating it has finished.
    pub(crate) async fn migrate<DB: Backend>(
        &self,
        conn: &mut DB::Connection,
    ) -> Result<(), sqlx::Error> {
        DB::migrate(conn, &self.migrate_lock(), &self.ddl).await
    }
}

/// SQL text for one inbox table, formatted once when the [`crate::Inbox`] is built.
#[derive(Debug)]
#[allow(unreachable_pub)] // named by the sealed traits, unreachable outside the crate
pub struct InboxSql {
    pub(crate) common: Arc<TableSql>,
    /// Inserts one row; reports 1 row for fresh.
    pub(crate) claim: Arc<str>,
    /// Inserts a sorted batch; returns the fresh ids (MySQL claims a batch one id at a time).
    #[cfg_attr(not(any(feature = "postgres", feature = "sqlite")), allow(dead_code))]
    pub(crate) claim_batch: Arc<str>,
    /// Counts one deferral of a message: handler, id, now in Unix milliseconds.
    pub(crate) defer: Arc<str>,
    /// Reads a message's deferrals and the first one's time: handler, id.
    pub(crate) deferrals: Arc<str>,
    /// Forgets a message's deferrals: handler, id.
    pub(crate) forget_deferrals: Arc<str>,
    /// Each handler's rows and its oldest row's age in milliseconds.
    pub(crate) handlers: Arc<str>,
}

impl InboxSql {
    pub(crate) fn new<DB: sealed::Statements>(table: &TableName) -> Self {
        let fill =
            |template: &str| -> Arc<str> { template.replace("{table}", table.as_str()).into() };
        Self {
            common: Arc::new(TableSql::new::<DB>(
                table,
                "seen_at",
                DB::INBOX_DDL,
                "guestlist_inbox",
            )),
            claim: fill(DB::CLAIM),
            claim_batch: fill(DB::CLAIM_BATCH),
            defer: fill(DB::DEFER),
            deferrals: fill(DB::DEFERRALS),
            forget_deferrals: fill(DB::FORGET_DEFERRALS),
            handlers: fill(DB::INBOX_HANDLERS),
        }
    }
}

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
    /// Claims a key on the caller's transaction behind an advisory lock (PostgreSQL only;
    /// empty elsewhere).
    #[cfg_attr(not(feature = "postgres"), allow(dead_code))]
    pub(crate) claim_locked: Arc<str>,
}

impl KeysSql {
    pub(crate) fn new<DB: sealed::KeyStatements>(table: &TableName) -> Self {
        let fill =
            |template: &str| -> Arc<str> { template.replace("{table}", table.as_str()).into() };
        Self {
            common: Arc::new(TableSql::new::<DB>(
                table,
                "created_at",
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
            claim_locked: fill(DB::KEY_CLAIM_LOCKED),
        }
    }
}

/// SQL text for one outbox table, formatted once when the [`crate::Outbox`] is built.
#[derive(Debug)]
#[allow(unreachable_pub)] // named by the sealed traits, unreachable outside the crate
pub struct OutboxSql {
    pub(crate) common: Arc<TableSql>,
    /// Takes an ordering key's next seq and locks its row until the transaction ends: key.
    pub(crate) next_seq: Arc<str>,
    /// Reads the seq [`OutboxSql::next_seq`] just took, where the upsert returns nothing
    /// (MySQL): key. Empty elsewhere.
    #[cfg_attr(not(feature = "mysql"), allow(dead_code))]
    pub(crate) read_seq: Arc<str>,
    /// Inserts a message unless its id is there: id, topic, ordering key, seq, headers,
    /// payload; 1 row when new.
    pub(crate) insert: Arc<str>,
}

impl OutboxSql {
    pub(crate) fn new<DB: sealed::OutboxStatements>(table: &TableName) -> Self {
        let fill =
            |template: &str| -> Arc<str> { template.replace("{table}", table.as_str()).into() };
        Self {
            common: Arc::new(TableSql::new::<DB>(
                table,
                "published_at",
                DB::OUTBOX_DDL,
                "guestlist_outbox",
            )),
            next_seq: fill(DB::OUTBOX_NEXT_SEQ),
            read_seq: fill(DB::OUTBOX_READ_SEQ),
            insert: fill(DB::OUTBOX_INSERT),
        }
    }
}

/// One outgoing message's row, as [`sealed::OutboxStatements::outbox_insert`] binds it.
#[derive(Debug, Clone, Copy)]
#[allow(unreachable_pub)] // named by the sealed traits, unreachable outside the crate
pub struct OutboxRow<'a> {
    pub(crate) message_id: &'a str,
    pub(crate) topic: &'a str,
    pub(crate) ordering_key: Option<&'a str>,
    pub(crate) seq: i64,
    pub(crate) headers: Option<&'a [u8]>,
    pub(crate) payload: &'a [u8],
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
}

/// The key table's figures as read: rows, in flight, oldest age (ms), size (bytes).
#[allow(unreachable_pub)] // named by the sealed traits, unreachable outside the crate
pub type KeyStatsRow = (i64, i64, Option<i64>, Option<i64>);

/// A table's size as read: table bytes, index bytes, dead rows, free bytes.
#[allow(unreachable_pub)] // named by the sealed traits, unreachable outside the crate
pub type SizeRow = (Option<i64>, Option<i64>, Option<i64>, Option<i64>);

/// One handler's rows in an inbox as read: handler, rows, the oldest row's age (ms).
#[allow(unreachable_pub)] // named by the sealed traits, unreachable outside the crate
pub type HandlerRow = (String, i64, Option<i64>);

/// Splits a DDL file into statements, dropping `--` comment lines and renaming the table.
fn ddl_statements(file: &str, default_name: &str, table: &str) -> Vec<String> {
    let code: String = file
        .lines()
        .filter(|line| !line.trim_start().starts_with("--"))
        .collect::<Vec<_>>()
        .join("\n");
    split_statements(&code)
        .into_iter()
        .map(str::trim)
        .filter(|statement| !statement.is_empty())
        .map(|statement| statement.replace(default_name, table))
        .collect()
}

/// `code` cut at each `;` that is not inside a `$$`-quoted body (a PostgreSQL function's).
fn split_statements(code: &str) -> Vec<&str> {
    let mut statements = Vec::new();
    let (mut start, mut quoted) = (0, false);
    let bytes = code.as_bytes();
    let mut at = 0;
    while at < bytes.len() {
        if code[at..].starts_with("$$") {
            quoted = !quoted;
            at += 2;
            continue;
        }
        if bytes[at] == b';' && !quoted {
            statements.push(&code[start..at]);
            start = at + 1;
        }
        at += 1;
    }
    statements.push(&code[start..]);
    statements
}

/// `$query` with an outgoing message's columns bound, in the order the inserts name them.
#[cfg(any(feature = "postgres", feature = "sqlite", feature = "mysql"))]
macro_rules! bind_outbox_row {
    ($query:expr, $row:expr) => {{
        let row = $row;
        $query
            .bind(row.message_id)
            .bind(row.topic)
            .bind(row.ordering_key)
            .bind(row.seq)
            .bind(row.headers)
            .bind(row.payload)
    }};
}
#[cfg(any(feature = "postgres", feature = "sqlite", feature = "mysql"))]
use bind_outbox_row;

/// The outbox's statements where an upsert returns the key's seq and a duplicate id inserts
/// nothing; only the connection type differs.
#[cfg(any(feature = "postgres", feature = "sqlite"))]
macro_rules! outbox_with_returning {
    ($conn:ty) => {
        async fn outbox_next_seq<'c>(
            conn: &'c mut $conn,
            sql: &'c $crate::backend::OutboxSql,
            key: &'c str,
        ) -> Result<i64, sqlx::Error> {
            sqlx::query_scalar(sqlx::AssertSqlSafe(sql.next_seq.clone()))
                .bind(key)
                .fetch_one(conn)
                .await
        }

        async fn outbox_insert<'c>(
            conn: &'c mut $conn,
            sql: &'c $crate::backend::OutboxSql,
            row: $crate::backend::OutboxRow<'c>,
        ) -> Result<bool, sqlx::Error> {
            let insert = sqlx::query(sqlx::AssertSqlSafe(sql.insert.clone()));
            let done = $crate::backend::bind_outbox_row!(insert, row)
                .execute(conn)
                .await?;
            Ok(done.rows_affected() == 1)
        }
    };
}
#[cfg(any(feature = "postgres", feature = "sqlite"))]
use outbox_with_returning;

/// The statements every backend runs the same way, bound the same way; only the connection
/// type differs.
#[cfg(any(feature = "postgres", feature = "sqlite", feature = "mysql"))]
macro_rules! same_everywhere {
    ($conn:ty) => {
        async fn deferrals<'c>(
            conn: &'c mut $conn,
            sql: &'c InboxSql,
            handler: &'c str,
            id: &'c str,
        ) -> Result<Option<(i64, i64)>, sqlx::Error> {
            sqlx::query_as(sqlx::AssertSqlSafe(sql.deferrals.clone()))
                .bind(handler)
                .bind(id)
                .fetch_optional(conn)
                .await
        }

        async fn forget_deferrals<'c>(
            conn: &'c mut $conn,
            sql: &'c InboxSql,
            handler: &'c str,
            id: &'c str,
        ) -> Result<(), sqlx::Error> {
            sqlx::query(sqlx::AssertSqlSafe(sql.forget_deferrals.clone()))
                .bind(handler)
                .bind(id)
                .execute(conn)
                .await
                .map(drop)
        }

        async fn count_older<'c>(
            conn: &'c mut $conn,
            sql: &'c TableSql,
            older_than_secs: i64,
        ) -> Result<u64, sqlx::Error> {
            let count: i64 = sqlx::query_scalar(sqlx::AssertSqlSafe(sql.count_older.clone()))
                .bind(older_than_secs)
                .fetch_one(conn)
                .await?;
            Ok(count.max(0) as u64)
        }

        async fn table_size<'c>(
            conn: &'c mut $conn,
            sql: &'c TableSql,
        ) -> Result<super::SizeRow, sqlx::Error> {
            sqlx::query_as(sqlx::AssertSqlSafe(sql.size.clone()))
                .fetch_one(conn)
                .await
        }

        async fn inbox_handlers<'c>(
            conn: &'c mut $conn,
            sql: &'c InboxSql,
        ) -> Result<Vec<super::HandlerRow>, sqlx::Error> {
            sqlx::query_as(sqlx::AssertSqlSafe(sql.handlers.clone()))
                .fetch_all(conn)
                .await
        }
    };
}
#[cfg(any(feature = "postgres", feature = "sqlite", feature = "mysql"))]
use same_everywhere;

/// A purge batch that starts from the oldest row each time: where a delete leaves nothing
/// behind in the index for the next batch to step over (SQLite), or until measured otherwise
/// (MySQL). It reports no place to resume from.
#[cfg(any(feature = "sqlite", feature = "mysql"))]
macro_rules! purge_from_the_oldest {
    ($conn:ty) => {
        async fn purge_batch<'c>(
            conn: &'c mut $conn,
            sql: &'c TableSql,
            older_than_secs: i64,
            limit: i64,
            _after_micros: Option<i64>,
        ) -> Result<(u64, Option<i64>), sqlx::Error> {
            let done = sqlx::query(sqlx::AssertSqlSafe(sql.purge_batch.clone()))
                .bind(older_than_secs)
                .bind(limit)
                .execute(conn)
                .await?;
            Ok((done.rows_affected(), None))
        }
    };
}
#[cfg(any(feature = "sqlite", feature = "mysql"))]
use purge_from_the_oldest;

/// A claim that reads "fresh" from one row affected by `INSERT … ON CONFLICT DO NOTHING`.
#[cfg(any(feature = "postgres", feature = "sqlite"))]
macro_rules! claim_by_rows_affected {
    ($conn:ty) => {
        async fn claim<'c>(
            conn: &'c mut $conn,
            sql: &'c InboxSql,
            handler: &'c str,
            id: &'c str,
        ) -> Result<bool, sqlx::Error> {
            let done = sqlx::query(sqlx::AssertSqlSafe(sql.claim.clone()))
                .bind(handler)
                .bind(id)
                .execute(conn)
                .await?;
            Ok(done.rows_affected() == 1)
        }
    };
}
#[cfg(any(feature = "postgres", feature = "sqlite"))]
use claim_by_rows_affected;

/// A deferral counted by an upsert that returns the row (`ON CONFLICT … DO UPDATE … RETURNING`).
#[cfg(any(feature = "postgres", feature = "sqlite"))]
macro_rules! defer_by_upsert_returning {
    ($conn:ty) => {
        async fn defer<'c>(
            conn: &'c mut $conn,
            sql: &'c InboxSql,
            handler: &'c str,
            id: &'c str,
            now_ms: i64,
        ) -> Result<(i64, i64), sqlx::Error> {
            sqlx::query_as(sqlx::AssertSqlSafe(sql.defer.clone()))
                .bind(handler)
                .bind(id)
                .bind(now_ms)
                .fetch_one(conn)
                .await
        }
    };
}
#[cfg(any(feature = "postgres", feature = "sqlite"))]
use defer_by_upsert_returning;

/// A key insert that reads "new" from one row affected by `INSERT … ON CONFLICT DO NOTHING`.
#[cfg(any(feature = "postgres", feature = "sqlite"))]
macro_rules! key_insert_by_rows_affected {
    ($conn:ty) => {
        async fn key_insert<'c>(
            conn: &'c mut $conn,
            sql: &'c KeysSql,
            scope: &'c str,
            key: &'c str,
            fingerprint: &'c [u8],
            token: i64,
            lease_ms: i64,
        ) -> Result<bool, sqlx::Error> {
            let done = sqlx::query(sqlx::AssertSqlSafe(sql.insert.clone()))
                .bind(scope)
                .bind(key)
                .bind(fingerprint)
                .bind(token)
                .bind(lease_ms)
                .execute(conn)
                .await?;
            Ok(done.rows_affected() == 1)
        }
    };
}
#[cfg(any(feature = "postgres", feature = "sqlite"))]
use key_insert_by_rows_affected;

/// The key statements every backend binds and reads the same way.
#[cfg(any(feature = "postgres", feature = "sqlite", feature = "mysql"))]
macro_rules! keys_same_everywhere {
    ($conn:ty) => {
        async fn key_select<'c>(
            conn: &'c mut $conn,
            sql: &'c KeysSql,
            scope: &'c str,
            key: &'c str,
        ) -> Result<Option<super::KeyRow>, sqlx::Error> {
            type Columns = (
                Vec<u8>,
                Option<i32>,
                Option<Vec<u8>>,
                Option<Vec<u8>>,
                i64,
                i64,
                Option<i64>,
            );
            let row: Option<Columns> = sqlx::query_as(sqlx::AssertSqlSafe(sql.select.clone()))
                .bind(scope)
                .bind(key)
                .fetch_optional(conn)
                .await?;
            Ok(row.map(
                |(fingerprint, status, headers, body, attempt, token, lease_left_ms)| {
                    super::KeyRow {
                        fingerprint,
                        status,
                        headers,
                        body,
                        attempt,
                        token,
                        lease_left_ms,
                    }
                },
            ))
        }

        async fn key_stats<'c>(
            conn: &'c mut $conn,
            sql: &'c KeysSql,
        ) -> Result<super::KeyStatsRow, sqlx::Error> {
            sqlx::query_as(sqlx::AssertSqlSafe(sql.stats.clone()))
                .fetch_one(conn)
                .await
        }

        async fn key_usage<'c>(
            conn: &'c mut $conn,
            sql: &'c KeysSql,
            scope: &'c str,
        ) -> Result<(i64, i64), sqlx::Error> {
            sqlx::query_as(sqlx::AssertSqlSafe(sql.usage.clone()))
                .bind(scope)
                .fetch_one(conn)
                .await
        }

        async fn key_update<'c>(
            conn: &'c mut $conn,
            statement: &'c std::sync::Arc<str>,
            values: super::sealed::KeyValues<'c>,
        ) -> Result<u64, sqlx::Error> {
            use super::sealed::KeyValues;
            let query = sqlx::query(sqlx::AssertSqlSafe(statement.clone()));
            let query = match values {
                KeyValues::TakeOver(token, lease_ms, scope, key, held) => query
                    .bind(token)
                    .bind(lease_ms)
                    .bind(scope)
                    .bind(key)
                    .bind(held),
                KeyValues::Complete(status, headers, body, scope, key, attempt) => query
                    .bind(status)
                    .bind(headers)
                    .bind(body)
                    .bind(scope)
                    .bind(key)
                    .bind(attempt),
                KeyValues::Release(scope, key, attempt) => {
                    query.bind(scope).bind(key).bind(attempt)
                }
                KeyValues::Evict(scope, key) => query.bind(scope).bind(key),
            };
            Ok(query.execute(conn).await?.rows_affected())
        }
    };
}
#[cfg(any(feature = "postgres", feature = "sqlite", feature = "mysql"))]
use keys_same_everywhere;

/// `true` when the error is a deadlock, a serialization failure or a busy database: running the
/// whole transaction again may succeed.
pub(crate) fn is_retryable(err: &sqlx::Error) -> bool {
    err.as_database_error().is_some_and(is_retryable_db)
}

/// `true` when `err`, one link of an error chain, is a database driver's own error (not wrapped
/// in [`sqlx::Error`]) that is worth running the transaction again for. Wrappers such as
/// `anyhow::Error::from_boxed` hide the `sqlx::Error` and show the driver's error as the link.
pub(crate) fn is_retryable_driver_error(err: &(dyn std::error::Error + 'static)) -> bool {
    driver_error(err).is_some_and(is_retryable_db)
}

/// `true` when the database's answer is a deadlock, a serialization failure or a busy database.
pub(crate) fn is_retryable_db(db: &dyn sqlx::error::DatabaseError) -> bool {
    #[cfg(feature = "postgres")]
    if let Some(retryable) = postgres::is_retryable(db) {
        return retryable;
    }
    #[cfg(feature = "mysql")]
    if let Some(retryable) = mysql::is_retryable(db) {
        return retryable;
    }
    #[cfg(feature = "sqlite")]
    if let Some(retryable) = sqlite::is_retryable(db) {
        return retryable;
    }
    let _ = db;
    false
}

/// `err` as a driver's database error, where it is one of the enabled backends'.
pub(crate) fn driver_error<'a>(
    err: &'a (dyn std::error::Error + 'static),
) -> Option<&'a dyn sqlx::error::DatabaseError> {
    // sqlx::Error::Database's source is the box itself, which is an error of its own.
    if let Some(db) = err.downcast_ref::<Box<dyn sqlx::error::DatabaseError>>() {
        return Some(db.as_ref());
    }
    #[cfg(feature = "postgres")]
    if let Some(db) = err.downcast_ref::<sqlx::postgres::PgDatabaseError>() {
        return Some(db);
    }
    #[cfg(feature = "mysql")]
    if let Some(db) = err.downcast_ref::<sqlx::mysql::MySqlDatabaseError>() {
        return Some(db);
    }
    #[cfg(feature = "sqlite")]
    if let Some(db) = err.downcast_ref::<sqlx::sqlite::SqliteError>() {
        return Some(db);
    }
    let _ = err;
    None
}

/// `true` when the database answered with an error that says it cannot serve now (shutting
/// down, starting, out of connections or resources), rather than one about the statement.
pub(crate) fn is_unavailable(db: &dyn sqlx::error::DatabaseError) -> bool {
    let code = db.code();
    let code = code.as_deref().unwrap_or("");
    // SQLSTATE classes 08 (connection), 53 (insufficient resources), 57P (operator
    // intervention: shutdown, cannot connect now), 58 (system error); MySQL's too many
    // connections (1040), server shutdown (1053), out of memory (1037, 1038), and read-only
    // (1290, 1836: a fail-over in progress).
    if ["08", "53", "57P", "58"]
        .iter()
        .any(|class| code.starts_with(class))
    {
        return true;
    }
    #[cfg(feature = "mysql")]
    if let Some(err) = db.try_downcast_ref::<sqlx::mysql::MySqlDatabaseError>() {
        return matches!(err.number(), 1037 | 1038 | 1040 | 1053 | 1290 | 1836);
    }
    false
}

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

#[cfg(test)]
mod tests {
    use super::split_statements;

    #[test]
    fn a_dollar_quoted_body_stays_in_one_statement() {
        let code = "CREATE TABLE t (a INT);\nCREATE FUNCTION f() RETURNS trigger AS $$\nBEGIN\n    \
                    PERFORM 1;\n    RETURN NULL;\nEND\n$$;\nDO $$ BEGIN NULL; END $$;";
        let statements: Vec<&str> = split_statements(code)
            .into_iter()
            .map(str::trim)
            .filter(|s| !s.is_empty())
            .collect();
        assert_eq!(statements.len(), 3, "{statements:#?}");
        assert!(statements[1].contains("PERFORM 1;") && statements[1].ends_with("$$"));
        assert_eq!(statements[2], "DO $$ BEGIN NULL; END $$");
    }
}
