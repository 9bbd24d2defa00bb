//! The same guarantee written by hand, on PostgreSQL, as floors and peers for the layer:
//!
//! - `handwritten`: the least SQL a transactional key takes, in one transaction: the key row
//!   inserted `ON CONFLICT DO NOTHING`, the work, the stored response, commit; on a conflict,
//!   the stored row read back.
//! - `atomic_phases`: the design most teams copy (brandur's rocket-rides-atomic, "Implementing
//!   Stripe-like Idempotency Keys in Postgres"): the key row found or inserted and locked in a
//!   first transaction, the work and a recovery point in a second, the response stored and the
//!   lock cleared in a third.
//! - `same_guarantees_by_hand`: `handwritten` with what `claim_in_transaction` guarantees,
//!   written as tightly as by hand: the key's advisory lock tried and the transaction's idle
//!   timeout set to the lease in the claim's own statement (a concurrent retry is answered 409 at
//!   once instead of queueing, a stalled attempt ends at its lease), and the row those answers
//!   need in a table of the same shape as guestlist's: the client's scope beside the key (keys
//!   never cross clients), the request's fingerprint (a reused key with another payload is told
//!   422), the attempt's token and lease (a take-over fences a stale attempt), the stored
//!   headers, and the creation time with its index (the purge deletes by age). No savepoint,
//!   which only a handler that keeps its key locked needs.
//! - `replay_by_hand`: a retry answered the least a stored answer takes, the floor of the
//!   layer's replays: the key's row read by primary key from the layer's own table, and its
//!   status and body sent back (no fingerprint compared, no stored headers replayed).

use axum::Router;
use axum::body::Bytes;
use axum::extract::State;
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::post;
use guestlist::sqlx::postgres::PgRow;
use guestlist::sqlx::{self, PgPool, Row as _};

use super::ANSWER;

/// The key tables of the handlers (the same-guarantees one is guestlist's shape, made by
/// [`routers`]).
const TABLES: [&str; 5] = [
    "DROP TABLE IF EXISTS bench_http_hand_keys",
    "CREATE TABLE bench_http_hand_keys (key TEXT PRIMARY KEY, status INT, body BYTEA)",
    "DROP TABLE IF EXISTS bench_http_guarded_keys",
    "DROP TABLE IF EXISTS bench_http_phase_keys",
    "CREATE TABLE bench_http_phase_keys (key TEXT PRIMARY KEY, locked_at TIMESTAMPTZ, \
     recovery_point TEXT NOT NULL, status INT, body BYTEA)",
];

/// The routers of the handlers written by hand.
pub(super) struct ByHand {
    pub(super) handwritten: Router,
    pub(super) phases: Router,
    pub(super) same_guarantees: Router,
    pub(super) replay: Router,
}

/// Creates the tables and returns the routers.
pub(super) async fn routers(pool: PgPool) -> anyhow::Result<Option<ByHand>> {
    for statement in TABLES {
        sqlx::query(statement).execute(&pool).await?;
    }
    guestlist::SqlKeyStore::with_table(pool.clone(), GUARDED)?
        .migrate()
        .await?;
    let route = |handler| {
        Router::new()
            .route("/payments", handler)
            .with_state(pool.clone())
    };
    Ok(Some(ByHand {
        handwritten: route(post(handwritten)),
        phases: route(post(atomic_phases)),
        same_guarantees: route(post(same_guarantees)),
        replay: route(post(replay)),
    }))
}

/// What a handler answers: the status and body, or 500 when the database failed.
fn answer(result: Result<(u16, Vec<u8>), sqlx::Error>) -> Response {
    match result {
        Ok((status, body)) => (
            StatusCode::from_u16(status).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR),
            body,
        )
            .into_response(),
        Err(_) => StatusCode::SERVICE_UNAVAILABLE.into_response(),
    }
}

/// The request's key, or none.
fn key(headers: &HeaderMap) -> Option<String> {
    Some(headers.get("idempotency-key")?.to_str().ok()?.to_owned())
}

async fn handwritten(State(pool): State<PgPool>, headers: HeaderMap, body: Bytes) -> Response {
    one_transaction(
        &pool,
        &headers,
        &body,
        "INSERT INTO bench_http_hand_keys (key) VALUES ($1) ON CONFLICT DO NOTHING",
        "bench_http_hand_keys",
    )
    .await
}

/// The table of `same_guarantees_by_hand`: guestlist's key table's shape.
const GUARDED: &str = "bench_http_guarded_keys";

/// What `same_guarantees_by_hand` stores beside the body: the response's `Content-Type`.
const STORED_HEADERS: &[u8] = b"content-type\0application/json";

async fn same_guarantees(State(pool): State<PgPool>, headers: HeaderMap, body: Bytes) -> Response {
    let Some(key) = key(&headers) else {
        return StatusCode::BAD_REQUEST.into_response();
    };
    let credentials = headers.get("authorization").map(|v| v.as_bytes());
    let Some(scope) = credentials.and_then(guestlist::http::scope_of_credentials) else {
        return StatusCode::BAD_REQUEST.into_response();
    };
    let fingerprint = guestlist::keys::Fingerprint::builder("POST", "/payments").body(&body);
    let token = fastrand::i64(1..);
    answer(
        async {
            let mut tx = pool.begin().await?;
            let claimed = sqlx::query(
                "WITH lock AS (SELECT pg_try_advisory_xact_lock(hashtextextended($1 || $2, 0)) \
                 AS held, set_config('idle_in_transaction_session_timeout', '30000', true)) \
                 INSERT INTO bench_http_guarded_keys \
                 (scope, idempotency_key, fingerprint, token, locked_until) \
                 SELECT $1, $2, $3, $4, now() + interval '30 seconds' FROM lock WHERE held \
                 ON CONFLICT DO NOTHING",
            )
            .bind(scope.as_str())
            .bind(&key)
            .bind(fingerprint.as_bytes().as_slice())
            .bind(token)
            .execute(&mut *tx)
            .await?
            .rows_affected()
                == 1;
            if !claimed {
                tx.rollback().await?;
                return stored(&pool, GUARDED, &key).await;
            }
            sqlx::query("INSERT INTO bench_http_payments (body) VALUES ($1)")
                .bind(&body[..])
                .execute(&mut *tx)
                .await?;
            sqlx::query(
                "UPDATE bench_http_guarded_keys SET status = 201, headers = $3, body = $4, \
                 locked_until = NULL \
                 WHERE scope = $1 AND idempotency_key = $2 AND token = $5 AND status IS NULL",
            )
            .bind(scope.as_str())
            .bind(&key)
            .bind(STORED_HEADERS)
            .bind(ANSWER.as_bytes())
            .bind(token)
            .execute(&mut *tx)
            .await?;
            tx.commit().await?;
            Ok((201, ANSWER.as_bytes().to_vec()))
        }
        .await,
    )
}

/// A retry of a stored key, answered from the layer's key table by hand.
async fn replay(State(pool): State<PgPool>, headers: HeaderMap) -> Response {
    let Some(key) = key(&headers) else {
        return StatusCode::BAD_REQUEST.into_response();
    };
    let credentials = headers.get("authorization").map(|v| v.as_bytes());
    let Some(scope) = credentials.and_then(guestlist::http::scope_of_credentials) else {
        return StatusCode::BAD_REQUEST.into_response();
    };
    let row: Result<Option<StoredRow>, _> = sqlx::query_as(
        "SELECT status, body FROM bench_http_keys WHERE scope = $1 AND idempotency_key = $2",
    )
    .bind(scope.as_str())
    .bind(&key)
    .fetch_optional(&pool)
    .await;
    answer(row.map(stored_answer))
}

/// A key's stored status and body, as read (`SELECT status, body`).
struct StoredRow {
    status: Option<i32>,
    body: Option<Vec<u8>>,
}

impl sqlx::FromRow<'_, PgRow> for StoredRow {
    fn from_row(row: &PgRow) -> Result<Self, sqlx::Error> {
        Ok(Self {
            status: row.try_get(0)?,
            body: row.try_get(1)?,
        })
    }
}

/// What a retry is told from its key's row: the stored answer, or 409 while none is stored.
fn stored_answer(row: Option<StoredRow>) -> (u16, Vec<u8>) {
    match row {
        Some(StoredRow {
            status: Some(status),
            body: Some(body),
        }) => (u16::try_from(status).unwrap_or(500), body),
        _ => (409, Vec::new()),
    }
}

/// A key handled in one transaction: `claim` (the key's row inserted, or nothing where it is
/// taken), the work, the answer stored in `table`, commit; a key taken gets its stored answer.
async fn one_transaction(
    pool: &PgPool,
    headers: &HeaderMap,
    body: &[u8],
    claim: &'static str,
    table: &'static str,
) -> Response {
    let Some(key) = key(headers) else {
        return StatusCode::BAD_REQUEST.into_response();
    };
    answer(
        async {
            let mut tx = pool.begin().await?;
            let claimed = sqlx::query(claim)
                .bind(&key)
                .execute(&mut *tx)
                .await?
                .rows_affected()
                == 1;
            if !claimed {
                tx.rollback().await?;
                return stored(pool, table, &key).await;
            }
            sqlx::query("INSERT INTO bench_http_payments (body) VALUES ($1)")
                .bind(body)
                .execute(&mut *tx)
                .await?;
            sqlx::query(sqlx::AssertSqlSafe(format!(
                "UPDATE {table} SET status = 201, body = $2 WHERE key = $1"
            )))
            .bind(&key)
            .bind(ANSWER.as_bytes())
            .execute(&mut *tx)
            .await?;
            tx.commit().await?;
            Ok((201, ANSWER.as_bytes().to_vec()))
        }
        .await,
    )
}

async fn atomic_phases(State(pool): State<PgPool>, headers: HeaderMap, body: Bytes) -> Response {
    let Some(key) = key(&headers) else {
        return StatusCode::BAD_REQUEST.into_response();
    };
    answer(
        async {
            // Phase 1: find the key (locked) or insert it, and take its lock.
            let mut tx = pool.begin().await?;
            let found: Option<(Option<i32>,)> =
                sqlx::query_as("SELECT status FROM bench_http_phase_keys WHERE key = $1 FOR UPDATE")
                    .bind(&key)
                    .fetch_optional(&mut *tx)
                    .await?;
            if found.is_some() {
                tx.rollback().await?;
                return stored(&pool, "bench_http_phase_keys", &key).await;
            }
            sqlx::query(
                "INSERT INTO bench_http_phase_keys (key, locked_at, recovery_point) \
                 VALUES ($1, now(), 'started')",
            )
            .bind(&key)
            .execute(&mut *tx)
            .await?;
            tx.commit().await?;
            // Phase 2: the work, and the recovery point that says it is done.
            let mut tx = pool.begin().await?;
            sqlx::query("INSERT INTO bench_http_payments (body) VALUES ($1)")
                .bind(&body[..])
                .execute(&mut *tx)
                .await?;
            sqlx::query(
                "UPDATE bench_http_phase_keys SET recovery_point = 'payment_created' WHERE key = $1",
            )
            .bind(&key)
            .execute(&mut *tx)
            .await?;
            tx.commit().await?;
            // Phase 3: the response stored, the lock cleared.
            sqlx::query(
                "UPDATE bench_http_phase_keys SET status = 201, body = $2, \
                 recovery_point = 'finished', locked_at = NULL WHERE key = $1",
            )
            .bind(&key)
            .bind(ANSWER.as_bytes())
            .execute(&pool)
            .await?;
            Ok((201, ANSWER.as_bytes().to_vec()))
        }
        .await,
    )
}

/// The stored answer of `key` in `table`, or 409 while its first attempt runs.
async fn stored(pool: &PgPool, table: &str, key: &str) -> Result<(u16, Vec<u8>), sqlx::Error> {
    let column = if table == GUARDED {
        "idempotency_key"
    } else {
        "key"
    };
    let row: Option<StoredRow> = sqlx::query_as(sqlx::AssertSqlSafe(format!(
        "SELECT status, body FROM {table} WHERE {column} = $1"
    )))
    .bind(key)
    .fetch_optional(pool)
    .await?;
    Ok(stored_answer(row))
}
