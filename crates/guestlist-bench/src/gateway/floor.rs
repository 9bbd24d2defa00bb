//! `sql_floor`: the two durable writes a fresh key needs in plain mode, written by hand, with no
//! HTTP: the claim (an insert, committed) and the answer (an update, committed), one
//! transaction each per request, at the gateway's concurrency. The gateway's rounds batch
//! many requests' writes into one commit; this is what it costs without them.

use guestlist::SqlKeyStore;
use guestlist::sqlx::{self, PgPool};

/// The floor's key table: guestlist's own DDL (its `created_at` index included), so that the
/// floor writes what the gateway writes.
const TABLE: &str = "bench_gateway_floor";

/// What the upstream answers, stored as the gateway stores it.
const ANSWER: &[u8] = br#"{"id":"ch_3MmlLrLkdIwHu7ix0snN0B15","status":"succeeded"}"#;

/// A pool with one connection per load-generator connection, and a fresh table.
pub(super) async fn prepare(url: &str, connections: usize) -> anyhow::Result<PgPool> {
    let pool = sqlx::postgres::PgPoolOptions::new()
        .max_connections(u32::try_from(connections)?)
        .connect(url)
        .await?;
    drop_table(&pool).await?;
    SqlKeyStore::with_table(pool.clone(), TABLE)?
        .migrate()
        .await?;
    Ok(pool)
}

/// One fresh key's two writes.
pub(super) async fn claim_and_answer(pool: &PgPool, key: &str) -> anyhow::Result<u64> {
    let claimed = sqlx::query(
        "INSERT INTO bench_gateway_floor (scope, idempotency_key, fingerprint, token, locked_until) \
         VALUES ('bench', $1, $2, 1, now() + interval '30 seconds') ON CONFLICT DO NOTHING",
    )
    .bind(key)
    .bind(&[0u8; 32][..])
    .execute(pool)
    .await?;
    anyhow::ensure!(claimed.rows_affected() == 1, "key {key} was not fresh");
    sqlx::query(
        "UPDATE bench_gateway_floor SET status = 201, headers = $2, body = $3, \
         locked_until = NULL WHERE scope = 'bench' AND idempotency_key = $1 AND token = 1",
    )
    .bind(key)
    .bind(&b"content-type: application/json"[..])
    .bind(ANSWER)
    .execute(pool)
    .await?;
    Ok(1)
}

/// Drops the table once measured.
pub(super) async fn drop_table(pool: &PgPool) -> anyhow::Result<()> {
    sqlx::query(sqlx::AssertSqlSafe(format!("DROP TABLE IF EXISTS {TABLE}")))
        .execute(pool)
        .await?;
    Ok(())
}
