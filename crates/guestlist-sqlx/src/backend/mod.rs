//! Database differences, kept behind one sealed trait with an implementation per database.
//!
//! Everything that differs between PostgreSQL, SQLite and MySQL (SQL text, how a duplicate is
//! reported, which errors are worth a retry, how purgers take turns) lives in these files; the
//! inbox itself is written once, generically.

#[cfg(feature = "mysql")]
mod mysql;
#[cfg(feature = "postgres")]
mod postgres;
#[cfg(feature = "sqlite")]
pub mod sqlite;

use std::future::Future;
use std::sync::Arc;

use guestlist_core::TableName;
use sqlx::{Database, Pool, Transaction};

/// A database guestlist can keep its guest list in: [`sqlx::Postgres`], [`sqlx::Sqlite`] or
/// [`sqlx::MySql`], each behind the feature of the same name.
///
/// The trait is sealed: its methods are guestlist's own business.
pub trait Backend: sealed::Statements {}

impl<DB: sealed::Statements> Backend for DB {}

/// SQL text for one inbox table, formatted once when the [`crate::Inbox`] is built.
#[derive(Debug)]
#[allow(unreachable_pub)] // named by the sealed trait, unreachable outside the crate
pub struct InboxSql {
    pub(crate) table: TableName,
    /// Inserts one row; reports 1 row for fresh.
    pub(crate) claim: Arc<str>,
    /// Inserts a sorted batch; returns the fresh ids (MySQL claims a batch one id at a time).
    #[cfg_attr(not(any(feature = "postgres", feature = "sqlite")), allow(dead_code))]
    pub(crate) claim_batch: Arc<str>,
    /// Deletes at most `limit` rows older than a number of seconds.
    pub(crate) purge_batch: Arc<str>,
    /// Counts rows older than a number of seconds.
    pub(crate) count_older: Arc<str>,
    /// The DDL, one statement per entry.
    pub(crate) ddl: Vec<String>,
}

impl InboxSql {
    /// Formats the backend's templates with `table` substituted for `{table}` and for the
    /// `guestlist_inbox` of its DDL file.
    pub(crate) fn new<DB: sealed::Statements>(table: &TableName) -> Self {
        let name = table.as_str();
        let fill = |template: &str| -> Arc<str> { template.replace("{table}", name).into() };
        Self {
            table: table.clone(),
            claim: fill(DB::CLAIM),
            claim_batch: fill(DB::CLAIM_BATCH),
            purge_batch: fill(DB::PURGE_BATCH),
            count_older: fill(DB::COUNT_OLDER),
            ddl: ddl_statements(DB::DDL, name),
        }
    }
}

/// Splits a DDL file into statements, dropping `--` comment lines and renaming the table.
fn ddl_statements(file: &str, table: &str) -> Vec<String> {
    let code: String = file
        .lines()
        .filter(|line| !line.trim_start().starts_with("--"))
        .collect::<Vec<_>>()
        .join("\n");
    code.split(';')
        .map(str::trim)
        .filter(|statement| !statement.is_empty())
        .map(|statement| statement.replace("guestlist_inbox", table))
        .collect()
}

/// The statements every backend runs the same way, bound the same way; only the connection
/// type differs.
#[cfg(any(feature = "postgres", feature = "sqlite", feature = "mysql"))]
macro_rules! same_everywhere {
    ($conn:ty) => {
        async fn purge_batch<'c>(
            conn: &'c mut $conn,
            sql: &'c InboxSql,
            older_than_secs: i64,
            limit: i64,
        ) -> Result<u64, sqlx::Error> {
            let done = sqlx::query(sqlx::AssertSqlSafe(sql.purge_batch.clone()))
                .bind(older_than_secs)
                .bind(limit)
                .execute(conn)
                .await?;
            Ok(done.rows_affected())
        }

        async fn count_older<'c>(
            conn: &'c mut $conn,
            sql: &'c InboxSql,
            older_than_secs: i64,
        ) -> Result<u64, sqlx::Error> {
            let count: i64 = sqlx::query_scalar(sqlx::AssertSqlSafe(sql.count_older.clone()))
                .bind(older_than_secs)
                .fetch_one(conn)
                .await?;
            Ok(count.max(0) as u64)
        }
    };
}
#[cfg(any(feature = "postgres", feature = "sqlite", feature = "mysql"))]
use same_everywhere;

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

/// `true` when the error is a deadlock, a serialization failure or a busy database: running the
/// whole transaction again may succeed.
pub(crate) fn is_retryable(err: &sqlx::Error) -> bool {
    let Some(db) = err.as_database_error() else {
        return false;
    };
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
        const DDL: &'static str;
        /// One writer at a time for the whole database (SQLite): a purge must leave gaps as
        /// long as its batches, or waiting writers, which poll, may never find the lock free.
        const SINGLE_WRITER: bool = false;
        /// Template of [`InboxSql::claim`].
        const CLAIM: &'static str;
        /// Template of [`InboxSql::claim_batch`].
        const CLAIM_BATCH: &'static str;
        /// Template of [`InboxSql::purge_batch`].
        const PURGE_BATCH: &'static str;
        /// Template of [`InboxSql::count_older`].
        const COUNT_OLDER: &'static str;

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

        /// Deletes at most `limit` rows older than `older_than_secs`, returning how many went.
        fn purge_batch<'c>(
            conn: &'c mut Self::Connection,
            sql: &'c InboxSql,
            older_than_secs: i64,
            limit: i64,
        ) -> impl Future<Output = Result<u64, sqlx::Error>> + Send + 'c;

        /// Counts rows older than `older_than_secs`.
        fn count_older<'c>(
            conn: &'c mut Self::Connection,
            sql: &'c InboxSql,
            older_than_secs: i64,
        ) -> impl Future<Output = Result<u64, sqlx::Error>> + Send + 'c;

        /// Creates the table and its index, serialized against other migrating processes.
        fn migrate<'c>(
            conn: &'c mut Self::Connection,
            sql: &'c InboxSql,
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
    }
}
