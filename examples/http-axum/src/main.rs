//! The Idempotency-Key layer on axum, from the README alone: `POST /payments` with an
//! `Idempotency-Key` header makes one payment however often it is retried; a retry gets the
//! first response, 409 while the first still runs, 422 for the key reused with another body.
//!
//! Run it against a PostgreSQL with `payments (body TEXT)`:
//! `cargo run -p http-axum-example -- postgres://postgres@127.0.0.1:5432/test`.

use axum::{Router, http::StatusCode, routing::post};
use guestlist::SqlKeyStore;
use guestlist::http::{IdempotencyLayer, IdempotentTx};
use guestlist::sqlx::{self, Postgres};

async fn create_payment(mut tx: IdempotentTx<Postgres>, body: String) -> StatusCode {
    sqlx::query("INSERT INTO payments (body) VALUES ($1)")
        .bind(body)
        .execute(&mut *tx) // the same transaction the response is stored on
        .await
        .map_or(StatusCode::SERVICE_UNAVAILABLE, |_| StatusCode::CREATED)
}

async fn app(pool: sqlx::PgPool) -> Result<Router, guestlist::Error> {
    let keys = SqlKeyStore::new(pool); // table guestlist_keys
    keys.migrate().await?;
    Ok(Router::new()
        .route("/payments", post(create_payment))
        .layer(IdempotencyLayer::transactional(keys)))
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let url = std::env::args()
        .nth(1)
        .unwrap_or_else(|| "postgres://postgres@127.0.0.1:5432/test".to_owned());
    let app = app(sqlx::PgPool::connect(&url).await?).await?;
    let listener = tokio::net::TcpListener::bind("127.0.0.1:3000").await?;
    axum::serve(listener, app).await?;
    Ok(())
}
