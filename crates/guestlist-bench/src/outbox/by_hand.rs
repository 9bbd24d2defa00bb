//! The relays written by hand that the bench sets beside guestlist's: the polling relay written
//! the obvious way, and the database's part of relaying alone (read, then delete).

use guestlist::outbox::{OutboxMessage, Outcomes, Publish};
use guestlist::sqlx::postgres::PgRow;
use guestlist::sqlx::{self, PgPool, Row as _};

use super::{HANDWRITTEN_BATCH, PUBLISH_BATCH, TABLE};

/// The polling relay written the obvious way: a batch of unpublished rows, then for each row
/// a publish awaited for its confirmation and an UPDATE, until none is left.
pub(super) async fn handwritten<P: Publish>(pool: &PgPool, publisher: &P) -> anyhow::Result<()> {
    loop {
        let rows: Vec<HandwrittenRow> = sqlx::query_as(sqlx::AssertSqlSafe(format!(
            "SELECT id, message_id, topic, payload FROM {TABLE} \
             WHERE published_at IS NULL ORDER BY id LIMIT {HANDWRITTEN_BATCH}"
        )))
        .fetch_all(pool)
        .await?;
        if rows.is_empty() {
            return Ok(());
        }
        for row in rows {
            let message = OutboxMessage::new(row.message_id, row.topic, row.payload);
            let mut outcomes = Outcomes::with_capacity(1);
            publisher
                .publish(std::slice::from_ref(&message), &mut outcomes)
                .await;
            for outcome in outcomes.into_results(1) {
                outcome?;
            }
            sqlx::query(sqlx::AssertSqlSafe(format!(
                "UPDATE {TABLE} SET published_at = now() WHERE id = $1"
            )))
            .bind(row.id)
            .execute(pool)
            .await?;
        }
    }
}

/// An outbox row as the relay written the obvious way reads it (`SELECT id, message_id, topic,
/// payload`).
struct HandwrittenRow {
    id: i64,
    message_id: String,
    topic: String,
    payload: Vec<u8>,
}

impl sqlx::FromRow<'_, PgRow> for HandwrittenRow {
    fn from_row(row: &PgRow) -> Result<Self, sqlx::Error> {
        Ok(Self {
            id: row.try_get(0)?,
            message_id: row.try_get(1)?,
            topic: row.try_get(2)?,
            payload: row.try_get(3)?,
        })
    }
}

/// An outbox row as the relay reads it (`SELECT id, message_id, topic, ordering_key, seq,
/// headers, payload`): what the by-hand relays decode, whether or not they use it.
struct PendingRow {
    id: i64,
    _message_id: String,
    _topic: String,
    _ordering_key: Option<String>,
    _seq: i64,
    _headers: Option<Vec<u8>>,
    _payload: Vec<u8>,
}

impl sqlx::FromRow<'_, PgRow> for PendingRow {
    fn from_row(row: &PgRow) -> Result<Self, sqlx::Error> {
        Ok(Self {
            id: row.try_get(0)?,
            _message_id: row.try_get(1)?,
            _topic: row.try_get(2)?,
            _ordering_key: row.try_get(3)?,
            _seq: row.try_get(4)?,
            _headers: row.try_get(5)?,
            _payload: row.try_get(6)?,
        })
    }
}

/// The database's part of relaying, by hand: the oldest pending rows read, then deleted, a
/// batch at a time, until none is left.
pub(super) async fn read_and_delete(pool: &PgPool) -> anyhow::Result<()> {
    loop {
        let rows: Vec<PendingRow> = sqlx::query_as(sqlx::AssertSqlSafe(format!(
            "SELECT id, message_id, topic, ordering_key, seq, headers, payload FROM {TABLE} \
                 WHERE published_at IS NULL ORDER BY id LIMIT {PUBLISH_BATCH}"
        )))
        .fetch_all(pool)
        .await?;
        if rows.is_empty() {
            return Ok(());
        }
        let ids: Vec<i64> = rows.iter().map(|row| row.id).collect();
        sqlx::query(sqlx::AssertSqlSafe(format!(
            "DELETE FROM {TABLE} WHERE id = ANY($1)"
        )))
        .bind(&ids)
        .execute(pool)
        .await?;
    }
}
