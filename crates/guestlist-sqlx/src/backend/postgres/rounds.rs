//! PostgreSQL's round: every claim and stored response in one statement.

use std::collections::HashSet;
use std::sync::Arc;

use sqlx::{Pool, Postgres};

use crate::backend::KeysSql;
use crate::backend::keys::{Complete, Insert, WriteRound};

/// One round: the claims of new keys (scope, key, fingerprint, token, lease in milliseconds,
/// holder) and the stored responses of attempts (scope, key, token, status, headers, body), in one
/// statement and one commit. Returns the tokens of the rows inserted and of the rows completed:
/// a key already there inserts nothing, an attempt that lost its key completes nothing. An
/// answer whose key a request of another process waits on notifies it, as a single one does.
const ROUND: &str = "WITH claimed AS (\
     INSERT INTO {table} (scope, idempotency_key, fingerprint, token, locked_until, holder) \
     SELECT s, k, f, t, now() + interval '1 millisecond' * l, h \
     FROM unnest($1::text[], $2::text[], $3::bytea[], $4::bigint[], $5::bigint[], \
     $12::bigint[]) AS c(s, k, f, t, l, h) \
     ON CONFLICT DO NOTHING RETURNING token), \
     stored AS (\
     UPDATE {table} AS t \
     SET status = c.status, headers = c.headers, body = c.body, locked_until = NULL \
     FROM unnest($6::text[], $7::text[], $8::bigint[], $9::int[], $10::bytea[], $11::bytea[]) \
     AS c(s, k, tok, status, headers, body) \
     WHERE t.scope = c.s AND t.idempotency_key = c.k AND t.token = c.tok \
     AND t.status IS NULL \
     RETURNING t.token, t.waited, t.scope, t.idempotency_key), \
     told AS (SELECT pg_notify('{table}', length(scope) || ':' || scope || idempotency_key) \
     FROM stored WHERE waited) \
     SELECT token FROM claimed UNION ALL \
     SELECT token FROM stored WHERE (SELECT count(*) FROM told) >= 0";

impl WriteRound for Postgres {
    async fn write_round(
        pool: &Pool<Self>,
        sql: &KeysSql,
        claims: &[Insert<'_>],
        completes: &[Complete<'_>],
    ) -> Result<HashSet<i64>, sqlx::Error> {
        let sql: Arc<str> = ROUND.replace("{table}", sql.common.table.as_str()).into();
        let tokens = sqlx::query_scalar::<_, i64>(sqlx::AssertSqlSafe(sql))
            .bind(claims.iter().map(|c| c.key.scope).collect::<Vec<_>>())
            .bind(claims.iter().map(|c| c.key.key).collect::<Vec<_>>())
            .bind(claims.iter().map(|c| c.fingerprint).collect::<Vec<_>>())
            .bind(claims.iter().map(|c| c.token).collect::<Vec<_>>())
            .bind(claims.iter().map(|c| c.lease_ms).collect::<Vec<_>>())
            .bind(completes.iter().map(|c| c.key.scope).collect::<Vec<_>>())
            .bind(completes.iter().map(|c| c.key.key).collect::<Vec<_>>())
            .bind(completes.iter().map(|c| c.token).collect::<Vec<_>>())
            .bind(completes.iter().map(|c| c.status).collect::<Vec<_>>())
            .bind(completes.iter().map(|c| c.headers).collect::<Vec<_>>())
            .bind(completes.iter().map(|c| c.body).collect::<Vec<_>>())
            .bind(claims.iter().map(|c| c.holder).collect::<Vec<_>>())
            // Planned for each round, with the table as it is now: a plan cached while the table
            // was small joins the answers by scanning the whole table, and every round then
            // slows down as the table grows (a quarter of the speed at 50,000 keys).
            .persistent(false)
            .fetch_all(pool)
            .await?;
        Ok(tokens.into_iter().collect())
    }
}
