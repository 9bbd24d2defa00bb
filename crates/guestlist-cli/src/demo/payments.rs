//! The payments service the demo's warehouse charges: a stand-in for Stripe, behind guestlist's
//! own Idempotency-Key layer in transactional mode, served on a loopback port by the demo itself.
//!
//! The warehouse's side is [`charge`]: a POST whose `Idempotency-Key` the carry middleware
//! derives from the event being handled (`warehouse:<event>/charge`), the same on every
//! redelivery, so that payments replays the first charge instead of making a second.

use axum::Json;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::routing::post;
use guestlist::http::{IdempotencyLayer, IdempotentTx};
use guestlist::sqlx::Pool;
use guestlist::{Schema, SqlKeyStore};
use reqwest_middleware::ClientWithMiddleware;

use super::shop::{self, Shop};

/// The charges payments has made; the demo drops and recreates it.
const CHARGES: &str = "guestlist_demo_charges";
/// Payments' stored responses.
const KEYS: &str = "guestlist_demo_payment_keys";

/// Resets payments' tables on `pool` and serves payments on a loopback port; its base URL.
pub(super) async fn serve<DB: Shop>(pool: Pool<DB>) -> anyhow::Result<String> {
    // Under the lock every schema step takes, like any other process's.
    Schema::new([
        format!("DROP TABLE IF EXISTS {CHARGES}"),
        format!("DROP TABLE IF EXISTS {KEYS}"),
        format!("CREATE TABLE {CHARGES} (id VARCHAR(32) PRIMARY KEY, amount BIGINT NOT NULL)"),
    ])
    .migrate(&pool)
    .await?;
    let keys = SqlKeyStore::with_table(pool, KEYS)?;
    keys.migrate().await?;
    let app = axum::Router::new()
        .route("/v1/charges", post(create_charge::<DB>))
        .layer(IdempotencyLayer::transactional(keys).require_key(true));
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
    let url = format!("http://{}", listener.local_addr()?);
    tokio::spawn(async move { axum::serve(listener, app).await });
    Ok(url)
}

/// `POST /v1/charges {"amount": 1200}`: a new charge with an id like Stripe's, its row and the
/// stored response committed together.
async fn create_charge<DB: Shop>(
    mut tx: IdempotentTx<DB>,
    Json(request): Json<serde_json::Value>,
) -> Response {
    let Some(amount) = request["amount"].as_i64() else {
        return (
            StatusCode::BAD_REQUEST,
            "amount: an integer number of cents",
        )
            .into_response();
    };
    let id = format!("ch_{:016x}", rand::random::<u64>());
    let insert = format!("INSERT INTO {CHARGES} (id, amount) VALUES ('{id}', {amount})");
    match shop::exec::<DB>(&mut tx, insert).await {
        Ok(_) => (StatusCode::CREATED, Json(serde_json::json!({ "id": id }))).into_response(),
        // 5xx: the layer rolls back and releases the key, so the caller's retry runs again.
        Err(err) => (StatusCode::SERVICE_UNAVAILABLE, err.to_string()).into_response(),
    }
}

/// The warehouse's client: mutating calls carry the key of the event being handled.
pub(super) fn client() -> ClientWithMiddleware {
    reqwest_middleware::ClientBuilder::new(reqwest::Client::new())
        .with(guestlist_carry::CarryKey::new())
        .build()
}

/// Charges `amount` cents through payments at `url`, with the carried key of step `charge`; the
/// charge id payments returns.
pub(super) async fn charge(
    client: &ClientWithMiddleware,
    url: &str,
    amount: i64,
) -> anyhow::Result<String> {
    let response = client
        .post(format!("{url}/v1/charges"))
        .header("authorization", "Bearer warehouse")
        .json(&serde_json::json!({ "amount": amount }))
        .with_extension(guestlist_carry::Step("charge".into()))
        .send()
        .await?
        .error_for_status()?;
    let body: serde_json::Value = response.json().await?;
    body["id"]
        .as_str()
        .map(str::to_owned)
        .ok_or_else(|| anyhow::anyhow!("payments answered without a charge id: {body}"))
}

/// How many charges payments has made.
pub(super) async fn charges<DB: Shop>(pool: &Pool<DB>) -> anyhow::Result<i64> {
    Ok(DB::count(pool, format!("SELECT count(*) FROM {CHARGES}")).await?)
}
