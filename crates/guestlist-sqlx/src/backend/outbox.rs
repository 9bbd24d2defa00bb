//! The outbox's SQL: its statements, formatted once per table, the row an insert binds, and the
//! code the backends share for it.

use std::sync::Arc;

use guestlist_core::TableName;

use super::{TableSql, sealed};

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
pub(crate) use bind_outbox_row;

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
            let done = $crate::backend::outbox::bind_outbox_row!(insert, row)
                .execute(conn)
                .await?;
            Ok(done.rows_affected() == 1)
        }
    };
}
#[cfg(any(feature = "postgres", feature = "sqlite"))]
pub(crate) use outbox_with_returning;
