//! The warehouse's downstreams in the steps stories, served by the story's own process on
//! loopback ports: payments behind guestlist's own Idempotency-Key layer (transactional mode,
//! so a charge and its stored answer commit together), and an email sink that keeps no keys.
//! Both count every request by event, so that a story counts effects, not calls.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use axum::extract::State;
use axum::http::HeaderMap;
use axum::routing::post;
use axum::{Json, Router};
use guestlist_http::{IdempotencyLayer, IdempotentTx};
use guestlist_sqlx::SqlKeyStore;
use sqlx::Postgres;

use crate::Database;

/// Requests by event, as a downstream received them.
pub type Requests = Arc<Mutex<HashMap<String, Vec<Request>>>>;

/// One request a downstream received.
#[derive(Debug, Clone)]
pub struct Request {
    /// Its `Idempotency-Key`, if it carried one.
    pub key: Option<String>,
}

/// The two downstreams, running.
pub struct Downstream {
    /// Payments' base URL (`POST /v1/charges {"event": …}`).
    pub payments: String,
    /// The email sink's base URL (`POST /send {"event": …}`).
    pub email: String,
    /// Every request that reached payments (replays included), by event.
    pub charge_requests: Requests,
    /// Every email sent, by event.
    pub emails: Requests,
    /// The table of the charges payments made: one row per charge.
    pub charges: String,
}

impl Downstream {
    /// Starts both on `db`, with tables named after `tag`.
    pub async fn start(db: &Database<Postgres>, tag: &str) -> Self {
        let charges = format!("charges_{tag}");
        let keys = format!("pk_{tag}");
        for table in [&charges, &keys] {
            db.exec(format!("DROP TABLE IF EXISTS {table}")).await;
        }
        db.exec(format!(
            "CREATE TABLE {charges} (id BIGSERIAL PRIMARY KEY, event TEXT NOT NULL)"
        ))
        .await;
        let store = SqlKeyStore::with_table(db.pool.clone(), &keys).unwrap();
        store.migrate().await.unwrap();
        let charge_requests = Requests::default();
        let payments = Router::new()
            .route("/v1/charges", post(charge))
            .with_state(Payments {
                charges: Arc::from(charges.as_str()),
            })
            .layer(IdempotencyLayer::transactional(store).require_key(true))
            .layer(axum::middleware::from_fn_with_state(
                charge_requests.clone(),
                count,
            ));
        let emails = Requests::default();
        let email = Router::new()
            .route(
                "/send",
                post(async |Json(_): Json<serde_json::Value>| "sent"),
            )
            .layer(axum::middleware::from_fn_with_state(emails.clone(), count));
        Self {
            payments: serve(payments).await,
            email: serve(email).await,
            charge_requests,
            emails,
            charges,
        }
    }

    /// Requests that reached payments for `event`.
    pub fn charge_requests(&self, event: &str) -> Vec<Request> {
        requests(&self.charge_requests, event)
    }

    /// Emails sent for `event`.
    pub fn emails(&self, event: &str) -> usize {
        requests(&self.emails, event).len()
    }
}

fn requests(requests: &Requests, event: &str) -> Vec<Request> {
    requests
        .lock()
        .unwrap()
        .get(event)
        .cloned()
        .unwrap_or_default()
}

/// Serves `app` on a loopback port; its base URL.
async fn serve(app: Router) -> String {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    tokio::spawn(async move { axum::serve(listener, app).await });
    url
}

#[derive(Clone)]
struct Payments {
    charges: Arc<str>,
}

/// `POST /v1/charges {"event": "evt_1"}`: a charge row, committed with the stored answer.
async fn charge(
    State(payments): State<Payments>,
    mut tx: IdempotentTx<Postgres>,
    Json(body): Json<serde_json::Value>,
) -> Json<serde_json::Value> {
    let event = body["event"].as_str().unwrap_or_default().to_owned();
    let insert = format!(
        "INSERT INTO {} (event) VALUES ($1) RETURNING id",
        payments.charges
    );
    let id: i64 = sqlx::query_scalar(sqlx::AssertSqlSafe(insert))
        .bind(&event)
        .fetch_one(&mut *tx)
        .await
        .unwrap();
    Json(serde_json::json!({ "charge": format!("ch_{id}") }))
}

/// Counts a request by the event its JSON body names, with its key, then passes it on.
async fn count(
    State(requests): State<Requests>,
    headers: HeaderMap,
    request: axum::extract::Request,
    next: axum::middleware::Next,
) -> axum::response::Response {
    let (parts, body) = request.into_parts();
    let bytes = axum::body::to_bytes(body, 1 << 20)
        .await
        .unwrap_or_default();
    let event = serde_json::from_slice::<serde_json::Value>(&bytes)
        .ok()
        .and_then(|body| body["event"].as_str().map(str::to_owned))
        .unwrap_or_default();
    let key = headers
        .get("idempotency-key")
        .and_then(|value| value.to_str().ok())
        .map(str::to_owned);
    requests
        .lock()
        .unwrap()
        .entry(event)
        .or_default()
        .push(Request { key });
    next.run(axum::extract::Request::from_parts(parts, bytes.into()))
        .await
}
