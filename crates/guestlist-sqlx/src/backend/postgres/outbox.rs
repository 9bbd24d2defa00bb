//! PostgreSQL's outbox statements.

use sqlx::postgres::{PgConnection, PgListener};
use sqlx::{AssertSqlSafe, Postgres};

use crate::backend::Codec;
use crate::backend::RelaySql;
use crate::backend::Wake;
use crate::backend::relay::{PendingRow, RelayStatements, Stamp};
use crate::backend::sealed::OutboxStatements;
use crate::backend::statement::Columns;

impl OutboxStatements for Postgres {
    const OUTBOX_DDL: &'static str = include_str!("../../../sql/postgres/outbox.sql");
    // The upsert locks the key's row until the transaction ends: a second transaction on the
    // key waits here, and takes the next seq once the first has committed or rolled back.
    const OUTBOX_NEXT_SEQ: &'static str = "INSERT INTO {table}_keys AS k (ordering_key, last_seq) \
         VALUES ($1, 1) ON CONFLICT (ordering_key) DO UPDATE SET last_seq = k.last_seq + 1 \
         RETURNING last_seq";
    const OUTBOX_INSERT: &'static str = "INSERT INTO {table} \
         (message_id, topic, ordering_key, seq, headers, payload) \
         VALUES ($1, $2, $3, $4, $5, $6) ON CONFLICT (message_id) DO NOTHING";
    const OUTBOX_GIVE_BACK_SEQ: &'static str =
        "UPDATE {table}_keys SET last_seq = last_seq - 1 WHERE ordering_key = $1 AND last_seq = $2";
}

impl RelayStatements for Postgres {
    const RELAY_TAKE: &'static str = "UPDATE {table}_relay \
         SET token = token + 1, holder = $1, lease_until = now() + $2 * interval '1 millisecond' \
         WHERE shard = 0 AND lease_until < now() RETURNING token";
    const RELAY_RENEW: &'static str = "UPDATE {table}_relay \
         SET lease_until = now() + $1 * interval '1 millisecond' \
         WHERE shard = 0 AND token = $2 AND holder IS NOT NULL";
    const RELAY_RELEASE: &'static str = "UPDATE {table}_relay \
         SET holder = NULL, lease_until = '-infinity' WHERE shard = 0 AND token = $1";
    const RELAY_PENDING: &'static str = "SELECT id, message_id, topic, ordering_key, seq, \
         headers, payload FROM {table} WHERE published_at IS NULL AND id <> ALL($2) \
         AND (ordering_key IS NULL OR ordering_key <> ALL($3)) ORDER BY id LIMIT $1";
    const DEAD_LIST: &'static str = "SELECT id, message_id, topic, ordering_key, seq, reason, \
         (EXTRACT(EPOCH FROM (now() - dead_at)) * 1000)::bigint, length(payload)::bigint \
         FROM {table}_dead ORDER BY id LIMIT $1";
    const DEAD_RETRY: &'static str = "INSERT INTO {table} \
         (message_id, topic, ordering_key, seq, headers, payload) \
         SELECT message_id, topic, ordering_key, seq, headers, payload \
         FROM {table}_dead WHERE id = $1";
    const RELAY_BURY: &'static str = "INSERT INTO {table}_dead \
         (id, message_id, topic, ordering_key, seq, headers, payload, created_at, reason) \
         SELECT id, message_id, topic, ordering_key, seq, headers, payload, created_at, $1 \
         FROM {table} WHERE id = $2 AND published_at IS NULL ON CONFLICT (id) DO NOTHING";
    const RELAY_UNPEND: &'static str = "DELETE FROM {table} WHERE id = $1 AND published_at IS NULL";
    // The lease's renewal and the stamp in one statement: the renewal locks the lease's row, so
    // a take-over waits for the stamp or the stamp finds the lease gone and stamps nothing.
    const RELAY_STAMP: &'static str = "WITH lease AS (UPDATE {table}_relay \
         SET lease_until = now() + $1 * interval '1 millisecond' \
         WHERE shard = 0 AND token = $2 AND holder IS NOT NULL RETURNING 1), \
         stamped AS (UPDATE {table} SET published_at = now() \
         WHERE id = ANY($3) AND EXISTS (SELECT 1 FROM lease) RETURNING 1) \
         SELECT EXISTS (SELECT 1 FROM lease)";
    const RELAY_DELETE: &'static str = "WITH lease AS (UPDATE {table}_relay \
         SET lease_until = now() + $1 * interval '1 millisecond' \
         WHERE shard = 0 AND token = $2 AND holder IS NOT NULL RETURNING 1), \
         deleted AS (DELETE FROM {table} \
         WHERE id = ANY($3) AND EXISTS (SELECT 1 FROM lease) RETURNING 1) \
         SELECT EXISTS (SELECT 1 FROM lease)";
    const OUTBOX_BACKLOG: &'static str = "SELECT COUNT(*)::bigint, \
         (EXTRACT(EPOCH FROM (now() - MIN(created_at))) * 1000)::bigint \
         FROM {table} WHERE published_at IS NULL";
    const OUTBOX_STATS: &'static str = "SELECT COUNT(*)::bigint, \
         (COUNT(*) FILTER (WHERE published_at IS NULL))::bigint, \
         (EXTRACT(EPOCH FROM (now() - MIN(created_at) FILTER (WHERE published_at IS NULL))) \
         * 1000)::bigint, pg_total_relation_size('{table}'::regclass)::bigint FROM {table}";
    const RELAY_LEASE: &'static str = "SELECT token, holder, CASE WHEN isfinite(lease_until) \
         THEN (EXTRACT(EPOCH FROM (lease_until - now())) * 1000)::bigint END \
         FROM {table}_relay WHERE shard = 0";

    async fn relay_pending<'c>(
        conn: &'c mut PgConnection,
        sql: &'c RelaySql,
        limit: i64,
        exclude: &'c [i64],
        held: &'c [String],
    ) -> Result<Vec<PendingRow>, sqlx::Error> {
        let pending = sqlx::query(AssertSqlSafe(sql.pending.clone()))
            .bind(limit)
            .bind(exclude)
            .bind(held);
        let rows = Self::fetch_query(conn, pending).await?;
        rows.iter().map(PendingRow::read::<Self>).collect()
    }

    async fn relay_stamp<'c>(
        conn: &'c mut PgConnection,
        sql: &'c RelaySql,
        token: i64,
        lease_ms: i64,
        ids: &'c [i64],
        stamp: Stamp,
    ) -> Result<bool, sqlx::Error> {
        sqlx::query_scalar(AssertSqlSafe(sql.stamp(stamp).clone()))
            .bind(lease_ms)
            .bind(token)
            .bind(ids)
            .fetch_one(conn)
            .await
    }

    async fn listen<'p>(pool: &'p sqlx::PgPool, channel: &'p str) -> Result<Wake, sqlx::Error> {
        let mut listener = PgListener::connect_with(pool).await?;
        listener.listen(channel).await?;
        Ok(Wake::listening(listener))
    }
}
