//! The one row every measured handler writes, in each backend's SQL.

use guestlist::http::{IdempotencyLayer, Transactional};
use guestlist::sqlx::{self, Pool};
use guestlist::{Backend, SqlKeyStore};

use super::by_hand::ByHand;
use crate::work_future::WorkFuture;

/// The key table of the protected handlers.
pub(super) const KEYS: &str = "bench_http_keys";
/// The key table of the layer with the claim on the handler's transaction: its own, as each
/// hand-written figure has its own, so that no figure works on a table another one grew.
pub(super) const KEYS_IN_TX: &str = "bench_http_keys_in_tx";
/// The key table of the layer that seals stored bodies.
pub(super) const KEYS_SEALED: &str = "bench_http_keys_sealed";

/// A backend's SQL for the HTTP bench.
pub(super) trait HttpWorkload: Backend {
    const LABEL: &'static str;
    const CREATE: &'static str;
    /// What flushes the last figure's writes before the next figure runs (a checkpoint).
    const SETTLE: &'static str;
    /// Connections in the pool. SQLite has one writer: a few connections queue fairly in the
    /// pool, where many would poll for the file lock in its busy handler.
    const POOL: u32;
    /// Writes one payment on `conn` (a pool connection, or the request's transaction).
    fn insert<'c>(
        conn: &'c mut Self::Connection,
        body: &'c [u8],
    ) -> WorkFuture<'c, (), sqlx::Error>;
    /// Runs one statement on the pool.
    fn exec<'p>(pool: &'p Pool<Self>, sql: &'static str) -> WorkFuture<'p, (), sqlx::Error>;
    /// The layer with its claim on the handler's transaction, where the database offers it.
    fn claim_in_transaction(
        keys: SqlKeyStore<Self>,
    ) -> Option<IdempotencyLayer<Transactional<Self>>>;
    /// The `handwritten` and `atomic_phases` handlers, where they are written (PostgreSQL).
    fn by_hand(pool: Pool<Self>) -> WorkFuture<'static, Option<ByHand>, anyhow::Error>;
}

macro_rules! http_workload {
    ($db:ty, $conn:ty, $label:literal, $pool:literal, $create:literal, $insert:literal, $settle:literal, $in_tx:expr, $by_hand:expr) => {
        impl HttpWorkload for $db {
            const LABEL: &'static str = $label;
            const CREATE: &'static str = $create;
            const SETTLE: &'static str = $settle;
            const POOL: u32 = $pool;

            fn insert<'c>(conn: &'c mut $conn, body: &'c [u8]) -> WorkFuture<'c, (), sqlx::Error> {
                Box::pin(async move {
                    sqlx::query($insert)
                        .bind(body)
                        .execute(conn)
                        .await
                        .map(drop)
                })
            }

            fn exec<'p>(
                pool: &'p Pool<Self>,
                sql: &'static str,
            ) -> WorkFuture<'p, (), sqlx::Error> {
                Box::pin(async move { sqlx::query(sql).execute(pool).await.map(drop) })
            }

            fn claim_in_transaction(
                keys: SqlKeyStore<Self>,
            ) -> Option<IdempotencyLayer<Transactional<Self>>> {
                let in_tx: fn(SqlKeyStore<Self>) -> Option<IdempotencyLayer<Transactional<Self>>> =
                    $in_tx;
                in_tx(keys)
            }

            fn by_hand(pool: Pool<Self>) -> WorkFuture<'static, Option<ByHand>, anyhow::Error> {
                let by_hand: fn(Pool<Self>) -> WorkFuture<'static, Option<ByHand>, anyhow::Error> =
                    $by_hand;
                by_hand(pool)
            }
        }
    };
}

http_workload!(
    sqlx::Postgres,
    sqlx::PgConnection,
    "postgres",
    32,
    "CREATE TABLE bench_http_payments (id BIGSERIAL PRIMARY KEY, body BYTEA NOT NULL)",
    "INSERT INTO bench_http_payments (body) VALUES ($1)",
    "CHECKPOINT",
    |keys| Some(IdempotencyLayer::transactional(keys).claim_in_transaction()),
    |pool| Box::pin(super::by_hand::routers(pool))
);
http_workload!(
    sqlx::Sqlite,
    sqlx::SqliteConnection,
    "sqlite",
    4,
    "CREATE TABLE bench_http_payments (id INTEGER PRIMARY KEY, body BLOB NOT NULL)",
    "INSERT INTO bench_http_payments (body) VALUES (?1)",
    "PRAGMA wal_checkpoint(TRUNCATE)",
    |_| None,
    |_| Box::pin(async { Ok(None) })
);
http_workload!(
    sqlx::MySql,
    sqlx::MySqlConnection,
    "mysql",
    32,
    "CREATE TABLE bench_http_payments (id BIGINT AUTO_INCREMENT PRIMARY KEY, body BLOB NOT NULL)",
    "INSERT INTO bench_http_payments (body) VALUES (?)",
    "FLUSH TABLES",
    |_| None,
    |_| Box::pin(async { Ok(None) })
);
