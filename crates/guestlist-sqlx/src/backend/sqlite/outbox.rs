//! SQLite's outbox statements.

use sqlx::Sqlite;

use crate::backend::relay::{
    DeadStatements, FigureStatements, LeaseStatements, ListenStatements, PendingStatements,
    RegistryStatements, ReshardStatements, StampStatements,
};
use crate::backend::sealed::OutboxStatements;

impl OutboxStatements for Sqlite {
    const OUTBOX_DDL: &'static str = include_str!("../../../sql/sqlite/outbox.sql");
    const OUTBOX_NEXT_SEQ: &'static str = "INSERT INTO {table}_keys AS k (ordering_key, last_seq) \
         VALUES (?1, 1) ON CONFLICT (ordering_key) DO UPDATE SET last_seq = k.last_seq + 1 \
         RETURNING last_seq";
    const OUTBOX_INSERT: &'static str = "INSERT INTO {table} \
         (message_id, topic, ordering_key, seq, headers, payload, slot) \
         VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7) ON CONFLICT (message_id) DO NOTHING";
    const OUTBOX_GIVE_BACK_SEQ: &'static str =
        "UPDATE {table}_keys SET last_seq = last_seq - 1 WHERE ordering_key = ?1 AND last_seq = ?2";
}

impl LeaseStatements for Sqlite {
    const RELAY_TAKE: &'static str = "UPDATE {table}_relay SET token = token + 1, holder = ?1, \
         lease_until = strftime('%Y-%m-%d %H:%M:%f', 'now', '+' || (?2 / 1000.0) || ' seconds') \
         WHERE shard = ?3 AND shards = ?4 AND lease_until < strftime('%Y-%m-%d %H:%M:%f', 'now') \
         RETURNING token";
    const RELAY_RENEW: &'static str = "UPDATE {table}_relay \
         SET lease_until = strftime('%Y-%m-%d %H:%M:%f', 'now', '+' || (?1 / 1000.0) || ' seconds') \
         WHERE {held} AND holder IS NOT NULL";
    const RELAY_RELEASE: &'static str = "UPDATE {table}_relay SET holder = NULL, lease_until = '' \
         WHERE shard = ?1 AND token = ?2";
}

impl PendingStatements for Sqlite {
    const RELAY_PENDING: &'static str = "SELECT id, message_id, topic, ordering_key, seq, \
         headers, payload, slot FROM {table} WHERE published_at IS NULL{exclude} \
         ORDER BY id LIMIT ?1";
    const HEX_KEY: (&'static str, &'static str) = ("CAST(X'", "' AS TEXT)");
}

impl StampStatements for Sqlite {
    const RELAY_BURY: &'static str = "INSERT INTO {table}_dead \
         (id, message_id, topic, ordering_key, seq, headers, payload, created_at, reason, slot) \
         SELECT id, message_id, topic, ordering_key, seq, headers, payload, created_at, ?1, slot \
         FROM {table} WHERE id = ?2 AND published_at IS NULL ON CONFLICT (id) DO NOTHING";
    const RELAY_UNPEND: &'static str = "DELETE FROM {table} WHERE id = ?1 AND published_at IS NULL";
    // Followed by the literal id list; run after the renewal, on its transaction.
    const RELAY_STAMP: &'static str = "UPDATE {table} \
         SET published_at = strftime('%Y-%m-%d %H:%M:%f', 'now'), published_by = ?, \
         published_token = (SELECT r.token FROM {table}_relay AS r \
         WHERE r.shard = {table}.slot % r.shards) WHERE id IN ";
    const RELAY_DELETE: &'static str = "DELETE FROM {table} WHERE id IN ";
}

impl DeadStatements for Sqlite {
    const DEAD_LIST: &'static str = "SELECT id, message_id, topic, ordering_key, seq, reason, \
         CAST(round((julianday('now') - julianday(dead_at)) * 86400000.0) AS INTEGER), length(payload) \
         FROM {table}_dead ORDER BY id LIMIT ?1";
    const DEAD_RETRY: &'static str = "INSERT INTO {table} \
         (message_id, topic, ordering_key, seq, headers, payload, slot) \
         SELECT message_id, topic, ordering_key, seq, headers, payload, slot \
         FROM {table}_dead WHERE id = ?1";
    const DEAD_DROP: &'static str = "DELETE FROM {table}_dead WHERE id = ?1";
    const DEAD_READ: &'static str = "SELECT headers, payload FROM {table}_dead WHERE id = ?1";
    const DEAD_EDIT: &'static str =
        "UPDATE {table}_dead SET headers = ?1, payload = ?2 WHERE id = ?3";
}

impl FigureStatements for Sqlite {
    const OUTBOX_BACKLOG: &'static str = "SELECT COUNT(*), \
         CAST(round((julianday('now') - julianday(MIN(created_at))) * 86400000.0) AS INTEGER) \
         FROM {table} WHERE published_at IS NULL";
    const OUTBOX_STATS: &'static str = "SELECT COUNT(*), COALESCE(SUM(published_at IS NULL), 0), \
         CAST(round((julianday('now') - julianday(MIN(CASE WHEN published_at IS NULL \
         THEN created_at END))) * 86400000.0) AS INTEGER), \
         (SELECT page_count * page_size FROM pragma_page_count(), pragma_page_size()) \
         FROM {table}";
    const RELAY_SHARDS: &'static str = "SELECT shard, token, holder, CASE WHEN lease_until = '' \
         THEN NULL ELSE CAST(round((julianday(lease_until) - julianday('now')) * 86400000.0) \
         AS INTEGER) END, shards FROM {table}_relay ORDER BY shard";
    const RELAY_LAG: &'static str = "SELECT slot % ?1, COUNT(*), \
         CAST(round((julianday('now') - julianday(MIN(created_at))) * 86400000.0) AS INTEGER) \
         FROM {table} WHERE published_at IS NULL GROUP BY 1 ORDER BY 1";
}

impl RegistryStatements for Sqlite {
    const RELAY_BEAT: &'static str = "INSERT INTO {table}_relays (holder, seen_until) \
         VALUES (?1, strftime('%Y-%m-%d %H:%M:%f', 'now', '+' || (?2 / 1000.0) || ' seconds')) \
         ON CONFLICT (holder) DO UPDATE SET seen_until = excluded.seen_until";
    const RELAY_SWEEP: &'static str = "DELETE FROM {table}_relays \
         WHERE seen_until < strftime('%Y-%m-%d %H:%M:%f', 'now', '-1 hour')";
    const RELAY_LIVE: &'static str = "SELECT holder FROM {table}_relays \
         WHERE seen_until > strftime('%Y-%m-%d %H:%M:%f', 'now') ORDER BY holder";
    const RELAY_LEAVE: &'static str = "DELETE FROM {table}_relays WHERE holder = ?1";
}

impl ReshardStatements for Sqlite {
    const RESHARD_DROP: &'static str = "DELETE FROM {table}_relay WHERE shard >= ?1";
    const RESHARD_ADD: &'static str = "INSERT OR IGNORE INTO {table}_relay \
         (shard, token, lease_until, shards) VALUES (?1, 0, '', ?2)";
    const RESHARD_SET: &'static str =
        "UPDATE {table}_relay SET shards = ?1, token = ?2, holder = NULL, lease_until = ''";
}

impl ListenStatements for Sqlite {}
