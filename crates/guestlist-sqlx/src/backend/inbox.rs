//! The inbox's SQL: its statements, formatted once per table, and the code every backend runs
//! the same way for them.

use std::sync::Arc;

use guestlist_core::TableName;

use super::{TableSql, sealed};

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

/// One handler's rows in an inbox as read: handler, rows, the oldest row's age (ms).
#[allow(unreachable_pub)] // named by the sealed traits, unreachable outside the crate
pub type HandlerRow = (String, i64, Option<i64>);

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
pub(crate) use same_everywhere;

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
pub(crate) use purge_from_the_oldest;

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
pub(crate) use claim_by_rows_affected;

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
pub(crate) use defer_by_upsert_returning;
