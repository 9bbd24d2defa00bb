//! MySQL's and MariaDB's outbox statements: no `RETURNING`, and a duplicate id is the plain
//! `INSERT`'s duplicate-key error (see the module above for why).

use sqlx::mysql::MySqlConnection;
use sqlx::{AssertSqlSafe, MySql};

use super::inserted_unless_duplicate;
use crate::backend::sealed::OutboxStatements;
use crate::backend::{OutboxRow, OutboxSql};

impl OutboxStatements for MySql {
    const OUTBOX_DDL: &'static str = include_str!("../../../sql/mysql/outbox.sql");
    // The upsert locks the key's row until the transaction ends: a second transaction on the
    // key waits here, and takes the next seq once the first has committed or rolled back.
    const OUTBOX_NEXT_SEQ: &'static str = "INSERT INTO {table}_keys (ordering_key, last_seq) \
         VALUES (?, 1) ON DUPLICATE KEY UPDATE last_seq = last_seq + 1";
    // A locking read: it sees the row as this transaction just wrote it, whatever the snapshot.
    const OUTBOX_READ_SEQ: &'static str =
        "SELECT last_seq FROM {table}_keys WHERE ordering_key = ? FOR UPDATE";
    const OUTBOX_INSERT: &'static str = "INSERT INTO {table} \
         (message_id, topic, ordering_key, seq, headers, payload) VALUES (?, ?, ?, ?, ?, ?)";

    async fn outbox_next_seq<'c>(
        conn: &'c mut MySqlConnection,
        sql: &'c OutboxSql,
        key: &'c str,
    ) -> Result<i64, sqlx::Error> {
        sqlx::query(AssertSqlSafe(sql.next_seq.clone()))
            .bind(key)
            .execute(&mut *conn)
            .await?;
        sqlx::query_scalar(AssertSqlSafe(sql.read_seq.clone()))
            .bind(key)
            .fetch_one(conn)
            .await
    }

    async fn outbox_insert<'c>(
        conn: &'c mut MySqlConnection,
        sql: &'c OutboxSql,
        row: OutboxRow<'c>,
    ) -> Result<bool, sqlx::Error> {
        let insert = sqlx::query(AssertSqlSafe(sql.insert.clone()));
        let inserted = crate::backend::bind_outbox_row!(insert, row)
            .execute(conn)
            .await;
        inserted_unless_duplicate(inserted)
    }
}
