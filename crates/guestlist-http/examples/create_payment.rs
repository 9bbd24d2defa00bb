//! "Create payment", the endpoint a mobile app retries when the response dies in a tunnel.
//!
//! The handler inserts the payment on the request's transaction (`IdempotentTx`), and the layer
//! stores the response on that same transaction: the payment and its stored response commit
//! together. Run it to watch a retry replay the first answer, and a reused key get 422:
//!
//! ```text
//! cargo run -p guestlist-http --features sqlite,axum --example create_payment
//! cargo run -p guestlist-http --features sqlite,axum --example create_payment -- --serve
//! ```
//!
//! With `--serve` it listens on 127.0.0.1:3000 for your own requests:
//!
//! ```text
//! curl -i -X POST localhost:3000/payments -H 'Authorization: Bearer alice' \
//!      -H 'Idempotency-Key: 8e03978e-40d5-43e8-bc93-6894a57f9324' -d '{"amount":100}'
//! ```

use axum::Router;
use axum::body::Bytes;
use axum::http::{StatusCode, header};
use axum::response::IntoResponse;
use axum::routing::post;
use guestlist_http::{IdempotencyLayer, IdempotentTx};
use guestlist_sqlx::SqlKeyStore;
use sqlx::{Sqlite, SqlitePool};

/// Creates a payment: one row, on the transaction the layer commits with the stored response.
async fn create_payment(mut tx: IdempotentTx<Sqlite>, body: Bytes) -> impl IntoResponse {
    let inserted = sqlx::query("INSERT INTO payments (body) VALUES (?1) RETURNING id")
        .bind(body.to_vec())
        .fetch_one(&mut *tx)
        .await;
    match inserted {
        Ok(row) => {
            let id: i64 = sqlx::Row::get(&row, 0);
            (
                StatusCode::CREATED,
                [(header::LOCATION, format!("/payments/pay_{id}"))],
                format!("{{\"id\":\"pay_{id}\",\"status\":\"succeeded\"}}"),
            )
                .into_response()
        }
        // A 5xx rolls back and releases the key: the client's retry runs again.
        Err(err) => (StatusCode::SERVICE_UNAVAILABLE, err.to_string()).into_response(),
    }
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let dir = tempfile::tempdir()?;
    let path = dir.path().join("payments.db");
    let pool =
        SqlitePool::connect_with(guestlist_sqlx::sqlite_options(path.to_str().unwrap())?).await?;
    sqlx::query("CREATE TABLE payments (id INTEGER PRIMARY KEY, body BLOB NOT NULL)")
        .execute(&pool)
        .await?;
    let keys = SqlKeyStore::new(pool.clone());
    keys.migrate().await?;

    let app = Router::new()
        .route("/payments", post(create_payment))
        .layer(IdempotencyLayer::transactional(keys).require_key(true));

    let serve = std::env::args().any(|arg| arg == "--serve");
    let listener = tokio::net::TcpListener::bind(if serve {
        "127.0.0.1:3000"
    } else {
        "127.0.0.1:0"
    })
    .await?;
    let base = format!("http://{}", listener.local_addr()?);
    if serve {
        println!("listening on {base}");
        axum::serve(listener, app).await?;
        return Ok(());
    }
    tokio::spawn(async move { axum::serve(listener, app).await });

    let client = reqwest::Client::new();
    let pay = |key: &'static str, body: &'static str| {
        client
            .post(format!("{base}/payments"))
            .header("authorization", "Bearer alice")
            .header("idempotency-key", key)
            .body(body)
            .send()
    };
    for (what, key, body) in [
        ("first attempt", "8e03978e", r#"{"amount":100}"#),
        ("retry, same key", "8e03978e", r#"{"amount":100}"#),
        ("retry, same key", "8e03978e", r#"{"amount":100}"#),
        ("same key, other amount", "8e03978e", r#"{"amount":999}"#),
        ("a new key", "c41b0a77", r#"{"amount":100}"#),
    ] {
        let response = pay(key, body).await?;
        let status = response.status();
        let replayed = response.headers().contains_key("idempotent-replayed");
        let text = response.text().await?;
        println!(
            "{what:<24} {status} {} {text}",
            if replayed { "(replayed)" } else { "          " }
        );
    }
    let payments: i64 = sqlx::query_scalar("SELECT count(*) FROM payments")
        .fetch_one(&pool)
        .await?;
    println!("payments in the database: {payments}");
    assert_eq!(payments, 2, "one per key, however often it was retried");
    Ok(())
}
