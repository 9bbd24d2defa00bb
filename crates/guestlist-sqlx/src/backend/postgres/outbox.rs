//! PostgreSQL's outbox statements.

use sqlx::postgres::{PgConnection, PgListener};
use sqlx::{AssertSqlSafe, Postgres};

use crate::backend::Codec;
use crate::backend::RelaySql;
use crate::backend::Wake;
use crate::backend::relay::{
    DeadStatements, FigureStatements, Held, LeaseStatements, ListenStatements, Pending, PendingRow,
    PendingStatements, RegistryStatements, ReshardStatements, Stamp, StampStatements,
};
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
         (message_id, topic, ordering_key, seq, headers, payload, slot) \
         VALUES ($1, $2, $3, $4, $5, $6, $7) ON CONFLICT (message_id) DO NOTHING";
    const OUTBOX_GIVE_BACK_SEQ: &'static str =
        "UPDATE {table}_keys SET last_seq = last_seq - 1 WHERE ordering_key = $1 AND last_seq = $2";
}

impl LeaseStatements for Postgres {
    const RELAY_TAKE: &'static str = "UPDATE {table}_relay \
         SET token = token + 1, holder = $1, lease_until = now() + $2 * interval '1 millisecond' \
         WHERE shard = $3 AND shards = $4 AND lease_until < now() RETURNING token";
    const RELAY_RENEW: &'static str = "UPDATE {table}_relay \
         SET lease_until = now() + $1 * interval '1 millisecond' \
         WHERE {held} AND holder IS NOT NULL";
    const RELAY_RELEASE: &'static str = "UPDATE {table}_relay \
         SET holder = NULL, lease_until = '-infinity' WHERE shard = $1 AND token = $2";
}

impl PendingStatements for Postgres {
    const RELAY_PENDING: &'static str = "SELECT id, message_id, topic, ordering_key, seq, \
         headers, payload, slot::bigint FROM {table} WHERE published_at IS NULL AND id <> ALL($2) \
         AND (ordering_key IS NULL OR ordering_key <> ALL($3)) \
         AND ($4 = 1 OR slot % $4 = ANY($5)) ORDER BY id LIMIT $1";

    async fn relay_pending<'c>(
        conn: &'c mut PgConnection,
        sql: &'c RelaySql,
        pending: Pending<'c>,
    ) -> Result<Vec<PendingRow>, sqlx::Error> {
        let shards: Vec<i32> = pending.shards.iter().map(|s| *s as i32).collect();
        let query = sqlx::query(AssertSqlSafe(sql.pending.clone()))
            .bind(pending.limit)
            .bind(pending.exclude)
            .bind(pending.held)
            .bind(if pending.filters_shards() {
                i32::try_from(pending.count).unwrap_or(i32::MAX)
            } else {
                1
            })
            .bind(shards);
        let rows = Self::fetch_query(conn, query).await?;
        rows.iter().map(PendingRow::read::<Self>).collect()
    }
}

impl StampStatements for Postgres {
    const RELAY_BURY: &'static str = "INSERT INTO {table}_dead \
         (id, message_id, topic, ordering_key, seq, headers, payload, created_at, reason, slot) \
         SELECT id, message_id, topic, ordering_key, seq, headers, payload, created_at, $1, slot \
         FROM {table} WHERE id = $2 AND published_at IS NULL ON CONFLICT (id) DO NOTHING";
    const RELAY_UNPEND: &'static str = "DELETE FROM {table} WHERE id = $1 AND published_at IS NULL";
    // The leases' renewal and the stamp in one statement: the renewal locks the shards' rows, so
    // a take-over waits for the stamp or the stamp finds a lease gone and stamps nothing.
    const RELAY_STAMP: &'static str = "WITH lease AS (UPDATE {table}_relay AS r \
         SET lease_until = now() + $1 * interval '1 millisecond' \
         FROM unnest($2::int4[], $3::int8[]) AS held(shard, token) \
         WHERE r.shard = held.shard AND r.token = held.token AND r.holder IS NOT NULL \
         RETURNING 1), kept AS (SELECT count(*) = cardinality($2::int4[]) AS held FROM lease), \
         stamped AS (UPDATE {table} AS t SET published_at = now(), published_by = $5, \
         published_token = r.token FROM {table}_relay AS r \
         WHERE t.id = ANY($4) AND r.shard = t.slot % r.shards AND (SELECT held FROM kept) \
         RETURNING 1) \
         SELECT held FROM kept";
    const RELAY_DELETE: &'static str = "WITH lease AS (UPDATE {table}_relay AS r \
         SET lease_until = now() + $1 * interval '1 millisecond' \
         FROM unnest($2::int4[], $3::int8[]) AS held(shard, token) \
         WHERE r.shard = held.shard AND r.token = held.token AND r.holder IS NOT NULL \
         RETURNING 1), kept AS (SELECT count(*) = cardinality($2::int4[]) AS held FROM lease), \
         deleted AS (DELETE FROM {table} \
         WHERE id = ANY($4) AND (SELECT held FROM kept) RETURNING 1) \
         SELECT held FROM kept";

    async fn relay_stamp<'c>(
        conn: &'c mut PgConnection,
        sql: &'c RelaySql,
        held: &'c Held,
        lease_ms: i64,
        ids: &'c [i64],
        (stamp, holder): (Stamp, &'c str),
    ) -> Result<bool, sqlx::Error> {
        let (shards, tokens): (Vec<i32>, Vec<i64>) = held
            .iter()
            .map(|(shard, token)| (*shard as i32, *token))
            .unzip();
        let query = sqlx::query_scalar(AssertSqlSafe(sql.stamp(stamp).clone()))
            .bind(lease_ms)
            .bind(shards)
            .bind(tokens)
            .bind(ids);
        let query = match stamp {
            Stamp::Keep => query.bind(holder),
            Stamp::Delete => query,
        };
        query.fetch_one(conn).await
    }
}

impl DeadStatements for Postgres {
    const DEAD_LIST: &'static str = "SELECT id, message_id, topic, ordering_key, seq, reason, \
         (EXTRACT(EPOCH FROM (now() - dead_at)) * 1000)::bigint, length(payload)::bigint \
         FROM {table}_dead ORDER BY id LIMIT $1";
    const DEAD_RETRY: &'static str = "INSERT INTO {table} \
         (message_id, topic, ordering_key, seq, headers, payload, slot) \
         SELECT message_id, topic, ordering_key, seq, headers, payload, slot \
         FROM {table}_dead WHERE id = $1";
}

impl FigureStatements for Postgres {
    const OUTBOX_BACKLOG: &'static str = "SELECT COUNT(*)::bigint, \
         (EXTRACT(EPOCH FROM (now() - MIN(created_at))) * 1000)::bigint \
         FROM {table} WHERE published_at IS NULL";
    const OUTBOX_STATS: &'static str = "SELECT COUNT(*)::bigint, \
         (COUNT(*) FILTER (WHERE published_at IS NULL))::bigint, \
         (EXTRACT(EPOCH FROM (now() - MIN(created_at) FILTER (WHERE published_at IS NULL))) \
         * 1000)::bigint, pg_total_relation_size('{table}'::regclass)::bigint FROM {table}";
    const RELAY_SHARDS: &'static str = "SELECT shard::bigint, token, holder, \
         CASE WHEN isfinite(lease_until) \
         THEN (EXTRACT(EPOCH FROM (lease_until - now())) * 1000)::bigint END, shards::bigint \
         FROM {table}_relay ORDER BY shard";
    const RELAY_LAG: &'static str = "SELECT (slot % $1)::bigint, COUNT(*)::bigint, \
         (EXTRACT(EPOCH FROM (now() - MIN(created_at))) * 1000)::bigint \
         FROM {table} WHERE published_at IS NULL GROUP BY 1 ORDER BY 1";
}

impl RegistryStatements for Postgres {
    const RELAY_BEAT: &'static str = "INSERT INTO {table}_relays AS r (holder, seen_until) \
         VALUES ($1, now() + $2 * interval '1 millisecond') \
         ON CONFLICT (holder) DO UPDATE SET seen_until = EXCLUDED.seen_until";
    const RELAY_SWEEP: &'static str =
        "DELETE FROM {table}_relays WHERE seen_until < now() - interval '1 hour'";
    const RELAY_LIVE: &'static str =
        "SELECT holder FROM {table}_relays WHERE seen_until > now() ORDER BY holder";
    const RELAY_LEAVE: &'static str = "DELETE FROM {table}_relays WHERE holder = $1";
}

impl ReshardStatements for Postgres {
    const RESHARD_DROP: &'static str = "DELETE FROM {table}_relay WHERE shard >= $1";
    const RESHARD_ADD: &'static str = "INSERT INTO {table}_relay \
         (shard, token, lease_until, shards) VALUES ($1, 0, '-infinity', $2) \
         ON CONFLICT (shard) DO NOTHING";
    const RESHARD_SET: &'static str = "UPDATE {table}_relay \
         SET shards = $1, token = $2, holder = NULL, lease_until = '-infinity'";
}

impl ListenStatements for Postgres {
    async fn listen<'p>(pool: &'p sqlx::PgPool, channel: &'p str) -> Result<Wake, sqlx::Error> {
        let mut listener = PgListener::connect_with(pool).await?;
        listener.listen(channel).await?;
        Ok(Wake::listening(listener))
    }
}
