//! `payments`: the card network stand-in. `POST /v1/charges` with an `Idempotency-Key` creates a
//! charge once, however often it is retried; the charge row and the stored response commit in
//! one transaction.

use std::time::Duration;

use axum::Router;
use axum::extract::{Json, State};
use axum::http::StatusCode;
use axum::response::IntoResponse;
use axum::routing::post;
use guestlist::SqlKeyStore;
use guestlist::http::{IdempotencyLayer, IdempotentTx};
use guestlist::sqlx::Pool;
use serde::{Deserialize, Serialize};

use crate::db::Shop;

/// A charge to make.
#[derive(Debug, Serialize, Deserialize)]
pub struct ChargeRequest {
    /// The order it pays for.
    pub order: i64,
    /// In cents.
    pub amount: i64,
}

/// A charge made.
#[derive(Debug, Serialize, Deserialize, PartialEq, Eq)]
pub struct Charge {
    /// `ch_<n>`.
    pub id: String,
}

/// How payments runs.
#[derive(Debug, Clone, Copy)]
pub struct Options {
    /// How long a charge's key stays locked when its attempt died (the Idempotency-Key lease).
    pub lease: Duration,
    /// How long each charge takes after its row is written and before it commits: a slow card
    /// network, so that a crash can land mid-charge.
    pub charge_takes: Duration,
}

impl Default for Options {
    fn default() -> Self {
        Self {
            lease: Duration::from_secs(30),
            charge_takes: Duration::ZERO,
        }
    }
}

async fn charge<DB: Shop>(
    State(options): State<Options>,
    mut tx: IdempotentTx<DB>,
    Json(request): Json<ChargeRequest>,
) -> impl IntoResponse {
    let inserted = DB::insert_charge(&mut tx, request.order, request.amount).await;
    if !options.charge_takes.is_zero() {
        tokio::time::sleep(options.charge_takes).await;
    }
    match inserted {
        Ok(id) => (
            StatusCode::CREATED,
            Json(Charge {
                id: format!("ch_{id}"),
            }),
        )
            .into_response(),
        Err(err) => (StatusCode::SERVICE_UNAVAILABLE, err.to_string()).into_response(),
    }
}

/// The stored responses of `POST /v1/charges`.
const KEYS: &str = "payments_keys";

/// Creates payments' tables where missing: the example's own and the key table. Instances
/// that start at once take turns.
pub async fn migrate<DB: Shop>(pool: &Pool<DB>) -> anyhow::Result<()> {
    DB::create_tables(pool).await?;
    SqlKeyStore::with_table(pool.clone(), KEYS)?
        .migrate()
        .await?;
    Ok(())
}

/// The payments API on `pool` (after [`migrate`]): every charge requires an idempotency key,
/// scoped per caller.
pub fn router<DB: Shop>(pool: Pool<DB>, options: Options) -> anyhow::Result<Router> {
    let keys = SqlKeyStore::with_table(pool, KEYS)?;
    Ok(Router::new()
        .route("/v1/charges", post(charge::<DB>))
        .with_state(options)
        .layer(
            IdempotencyLayer::transactional(keys)
                .require_key(true)
                .lease(options.lease),
        ))
}
