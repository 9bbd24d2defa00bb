//! MySQL's and MariaDB's outbox statements: no `RETURNING`, and a duplicate id is the plain
//! `INSERT`'s duplicate-key error (see the module above for why).

use sqlx::mysql::MySqlConnection;
use sqlx::{Connection, MySql};

use crate::backend::outbox::next_seq;
use crate::backend::relay::lease::take;
use crate::backend::relay::{
    DeadStatements, FigureStatements, LeaseStatements, ListenStatements, PendingStatements,
    RegistryStatements, ReshardStatements, StampStatements,
};
use crate::backend::sealed::OutboxStatements;
use crate::backend::statement::Plain;
use crate::backend::{Codec, OutboxSql, RelaySql};

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
         (message_id, topic, ordering_key, seq, headers, payload, slot) \
         VALUES (?, ?, ?, ?, ?, ?, ?)";
    const OUTBOX_GIVE_BACK_SEQ: &'static str =
        "UPDATE {table}_keys SET last_seq = last_seq - 1 WHERE ordering_key = ? AND last_seq = ?";

    async fn outbox_next_seq<'c>(
        conn: &'c mut MySqlConnection,
        sql: &'c OutboxSql,
        key: &'c str,
    ) -> Result<i64, sqlx::Error> {
        Self::run(&mut *conn, sql, Plain::new(next_seq, (key,))).await?;
        let read = Plain::reading(|sql: &OutboxSql| &sql.read_seq, (key,));
        let (seq,): (i64,) = Self::fetch_one(conn, sql, read).await?;
        Ok(seq)
    }
}

impl LeaseStatements for MySql {
    const RELAY_TAKE: &'static str = "UPDATE {table}_relay SET token = token + 1, holder = ?, \
         lease_until = UTC_TIMESTAMP(6) + INTERVAL (? * 1000) MICROSECOND \
         WHERE shard = ? AND shards = ? AND lease_until < UTC_TIMESTAMP(6)";
    const RELAY_READ_TOKEN: &'static str = "SELECT token FROM {table}_relay WHERE shard = ?";
    const RELAY_RENEW: &'static str = "UPDATE {table}_relay \
         SET lease_until = UTC_TIMESTAMP(6) + INTERVAL (? * 1000) MICROSECOND \
         WHERE {held} AND holder IS NOT NULL";
    const RELAY_RELEASE: &'static str = "UPDATE {table}_relay \
         SET holder = NULL, lease_until = '1970-01-01 00:00:01' WHERE shard = ? AND token = ?";

    async fn relay_take<'c>(
        conn: &'c mut MySqlConnection,
        sql: &'c RelaySql,
        shard: u32,
        count: u32,
        holder: &'c str,
        lease_ms: i64,
    ) -> Result<Option<i64>, sqlx::Error> {
        // The update locks the shard's row until the token is read.
        let mut tx = conn.begin().await?;
        let args = (holder, lease_ms, i64::from(shard), i64::from(count));
        if Self::run(&mut tx, sql, Plain::new(take, args)).await? != 1 {
            return Ok(None);
        }
        let read = Plain::reading(|sql: &RelaySql| &sql.read_token, (i64::from(shard),));
        let (token,): (i64,) = Self::fetch_one(&mut tx, sql, read).await?;
        tx.commit().await?;
        Ok(Some(token))
    }
}

impl PendingStatements for MySql {
    // The text columns are bytes here (VARBINARY): read back as text.
    const RELAY_PENDING: &'static str = "SELECT id, \
         CAST(message_id AS CHAR) AS message_id, CAST(topic AS CHAR) AS topic, \
         CAST(ordering_key AS CHAR) AS ordering_key, seq, headers, payload, \
         CAST(slot AS SIGNED) AS slot FROM {table} WHERE published_at IS NULL{exclude} \
         ORDER BY id LIMIT ?";
    const HEX_KEY: (&'static str, &'static str) = ("X'", "'");
}

impl StampStatements for MySql {
    const RELAY_BURY: &'static str = "INSERT IGNORE INTO {table}_dead \
         (id, message_id, topic, ordering_key, seq, headers, payload, created_at, reason, slot) \
         SELECT id, message_id, topic, ordering_key, seq, headers, payload, created_at, ?, slot \
         FROM {table} WHERE id = ? AND published_at IS NULL";
    const RELAY_UNPEND: &'static str = "DELETE FROM {table} WHERE id = ? AND published_at IS NULL";
    // Followed by the literal id list; run after the renewal, on its transaction.
    const RELAY_STAMP: &'static str = "UPDATE {table} SET published_at = UTC_TIMESTAMP(6), \
         published_by = ?, published_token = (SELECT r.token FROM {table}_relay AS r \
         WHERE r.shard = {table}.slot % r.shards) WHERE id IN ";
    const RELAY_DELETE: &'static str = "DELETE FROM {table} WHERE id IN ";
}

impl DeadStatements for MySql {
    const DEAD_LIST: &'static str = "SELECT id, CAST(message_id AS CHAR), CAST(topic AS CHAR), CAST(ordering_key AS CHAR), seq, reason, \
         CAST(TIMESTAMPDIFF(MICROSECOND, dead_at, UTC_TIMESTAMP(6)) DIV 1000 AS SIGNED), CAST(LENGTH(payload) AS SIGNED) \
         FROM {table}_dead ORDER BY id LIMIT ?";
    const DEAD_RETRY: &'static str = "INSERT INTO {table} \
         (message_id, topic, ordering_key, seq, headers, payload, slot) \
         SELECT message_id, topic, ordering_key, seq, headers, payload, slot \
         FROM {table}_dead WHERE id = ?";
    const DEAD_DROP: &'static str = "DELETE FROM {table}_dead WHERE id = ?";
    const DEAD_READ: &'static str = "SELECT headers, payload FROM {table}_dead WHERE id = ?";
    const DEAD_EDIT: &'static str = "UPDATE {table}_dead SET headers = ?, payload = ? WHERE id = ?";
}

impl FigureStatements for MySql {
    const OUTBOX_BACKLOG: &'static str = "SELECT COUNT(*), \
         CAST(TIMESTAMPDIFF(MICROSECOND, MIN(created_at), UTC_TIMESTAMP(6)) DIV 1000 AS SIGNED) \
         FROM {table} WHERE published_at IS NULL";
    const OUTBOX_STATS: &'static str = "SELECT COUNT(*), \
         CAST(COALESCE(SUM(published_at IS NULL), 0) AS SIGNED), \
         CAST(TIMESTAMPDIFF(MICROSECOND, MIN(CASE WHEN published_at IS NULL THEN created_at END), \
         UTC_TIMESTAMP(6)) DIV 1000 AS SIGNED), \
         (SELECT CAST(data_length + index_length AS SIGNED) FROM information_schema.tables \
          WHERE table_schema = DATABASE() AND table_name = '{table}') \
         FROM {table}";
    const RELAY_SHARDS: &'static str = "SELECT CAST(shard AS SIGNED), token, CAST(holder AS CHAR), \
         CAST(TIMESTAMPDIFF(MICROSECOND, UTC_TIMESTAMP(6), lease_until) DIV 1000 AS SIGNED), \
         CAST(shards AS SIGNED) FROM {table}_relay ORDER BY shard";
    const RELAY_LAG: &'static str = "SELECT CAST(slot % ? AS SIGNED) AS shard, COUNT(*), \
         CAST(TIMESTAMPDIFF(MICROSECOND, MIN(created_at), UTC_TIMESTAMP(6)) DIV 1000 AS SIGNED) \
         FROM {table} WHERE published_at IS NULL GROUP BY shard ORDER BY shard";
}

impl RegistryStatements for MySql {
    const RELAY_BEAT: &'static str = "INSERT INTO {table}_relays (holder, seen_until) \
         VALUES (?, UTC_TIMESTAMP(6) + INTERVAL (? * 1000) MICROSECOND) \
         ON DUPLICATE KEY UPDATE seen_until = VALUES(seen_until)";
    const RELAY_SWEEP: &'static str = "DELETE FROM {table}_relays \
         WHERE seen_until < UTC_TIMESTAMP(6) - INTERVAL 1 HOUR";
    const RELAY_LIVE: &'static str = "SELECT CAST(holder AS CHAR) FROM {table}_relays \
         WHERE seen_until > UTC_TIMESTAMP(6) ORDER BY holder";
    const RELAY_LEAVE: &'static str = "DELETE FROM {table}_relays WHERE holder = ?";
}

impl ReshardStatements for MySql {
    const RESHARD_DROP: &'static str = "DELETE FROM {table}_relay WHERE shard >= ?";
    const RESHARD_ADD: &'static str = "INSERT IGNORE INTO {table}_relay \
         (shard, token, lease_until, shards) VALUES (?, 0, '1970-01-01 00:00:01', ?)";
    const RESHARD_UNSLOTTED: &'static str = "SELECT id, CAST(ordering_key AS CHAR), \
         CAST(message_id AS CHAR) FROM {table} WHERE published_at IS NULL AND slot = 0";
    const RESHARD_SLOT: &'static str = "UPDATE {table} SET slot = ? WHERE id = ?";
    const RESHARD_SET: &'static str = "UPDATE {table}_relay \
         SET shards = ?, token = ?, holder = NULL, lease_until = '1970-01-01 00:00:01'";
}

impl ListenStatements for MySql {}
