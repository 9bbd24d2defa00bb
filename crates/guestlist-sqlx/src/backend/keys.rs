//! The idempotency-key table's SQL: its statements, formatted once per table, and the code the
//! backends share for them.

use std::sync::Arc;

use guestlist_core::TableName;

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
pub(crate) use key_insert_by_rows_affected;

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
pub(crate) use keys_same_everywhere;
