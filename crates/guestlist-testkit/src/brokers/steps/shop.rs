//! The HTTP layer's steps story: a shop API behind the transactional layer whose order handler
//! runs charge (payments, over HTTP, the key carried) → reserve (the database) → the order's row
//! with the stored answer. Its server process is killed between two steps; the client's retry
//! with the same key, once the lease ended, resumes after the last finished step.

use std::time::{Duration, Instant};

use axum::extract::State;
use axum::http::StatusCode;
use axum::routing::post;
use axum::{Json, Router};
use guestlist_carry::CarryKey;
use guestlist_http::{IdempotencyLayer, IdempotentSteps};
use guestlist_sqlx::SqlKeyStore;
use reqwest_middleware::{ClientBuilder, ClientWithMiddleware};
use sqlx::{PgPool, Postgres};

use super::stories::Stage;
use super::warehouse::{AtPoint, Tables, stop_at};
use super::{LEASE, PAYMENTS};
use crate::brokers::Broker;
use crate::brokers::child::{Running, parent};

/// The environment variable the shop server reads its port from.
pub(super) const PORT: &str = "GUESTLIST_STEPS_PORT";

/// The shop's key table in the story tagged `tag`.
pub(super) fn shop_keys(tag: &str) -> String {
    format!("sk_{tag}")
}

/// The shop server of the HTTP steps story (a child test): `POST /orders` behind the
/// transactional layer on the story's database, until killed.
pub async fn shop_server<B: Broker>() {
    let Some((tag, url)) = parent("shop_server") else {
        return;
    };
    let pool = PgPool::connect(&url).await.unwrap();
    let var = |name: &str| std::env::var(name).unwrap_or_default();
    let store = SqlKeyStore::with_table(pool.clone(), &shop_keys(&tag)).unwrap();
    let shop = Shop {
        client: ClientBuilder::new(reqwest::Client::new())
            .with(CarryKey::new())
            .build(),
        payments: var(PAYMENTS),
        tables: Tables::of(&tag),
        pool,
    };
    let app = Router::new()
        .route("/orders", post(place_order))
        .with_state(std::sync::Arc::new(shop))
        .layer(
            IdempotencyLayer::transactional(store)
                .require_key(true)
                .lease(LEASE),
        );
    let listener = tokio::net::TcpListener::bind(format!("127.0.0.1:{}", var(PORT)))
        .await
        .unwrap();
    axum::serve(listener, app).await.unwrap();
}

struct Shop {
    client: ClientWithMiddleware,
    payments: String,
    tables: Tables,
    pool: PgPool,
}

/// `POST /orders {"event": "ord_1", "stop_at": "charge:journaled"}`: charge, reserve, then the
/// order's row; 201 with the charge, or 503 (the key released, the journal kept) on a failure.
async fn place_order(
    State(shop): State<std::sync::Arc<Shop>>,
    mut steps: IdempotentSteps<Postgres>,
    Json(body): Json<serde_json::Value>,
) -> (StatusCode, Json<serde_json::Value>) {
    let event = body["event"].as_str().unwrap_or_default().to_owned();
    let stop = |point: &'static str| {
        stop_at(
            &shop.pool,
            &shop.tables,
            AtPoint::Hang,
            &event,
            &body["stop_at"],
            point,
        )
    };
    let answer = async {
        let charge: String = steps
            .external("charge", || async {
                let answer = shop
                    .client
                    .post(format!("{}/v1/charges", shop.payments))
                    .bearer_auth("shop")
                    .json(&serde_json::json!({ "event": event }))
                    .send()
                    .await?
                    .error_for_status()?
                    .json::<serde_json::Value>()
                    .await?;
                stop("charge:called").await;
                Ok::<_, anyhow::Error>(answer["charge"].as_str().unwrap_or_default().to_owned())
            })
            .await?;
        stop("charge:journaled").await;
        steps
            .database("reserve", async |tx| {
                let insert = format!(
                    "INSERT INTO {} (event) VALUES ($1)",
                    shop.tables.reservations
                );
                sqlx::query(sqlx::AssertSqlSafe(insert))
                    .bind(&event)
                    .execute(&mut *tx)
                    .await?;
                Ok::<_, anyhow::Error>(())
            })
            .await?;
        stop("reserve:journaled").await;
        let mut tx = steps.transaction().await?;
        let insert = format!(
            "INSERT INTO {} (event, charge) VALUES ($1, $2)",
            shop.tables.orders
        );
        sqlx::query(sqlx::AssertSqlSafe(insert))
            .bind(&event)
            .bind(&charge)
            .execute(&mut *tx)
            .await?;
        Ok::<_, anyhow::Error>(charge)
    };
    match answer.await {
        Ok(charge) => (
            StatusCode::CREATED,
            Json(serde_json::json!({ "charge": charge })),
        ),
        Err(err) => (
            StatusCode::SERVICE_UNAVAILABLE,
            Json(serde_json::json!({ "error": format!("{err:#}") })),
        ),
    }
}

/// What the client saw, retrying one order with one key until it got its answer.
pub(super) struct Retried {
    /// The answer's status and body.
    pub(super) status: u16,
    pub(super) body: serde_json::Value,
    /// Whether the answer was a replay of a stored one.
    pub(super) replayed: bool,
    /// How many 409s it collected meanwhile.
    pub(super) conflicts: usize,
    /// How long it took.
    pub(super) took: Duration,
}

/// Posts order `body` to `shop` with `key` until an answer other than 409 or a refused
/// connection comes back (at most `limit`), as a client retrying with the same key does.
pub(super) async fn order_until_answered(
    shop: &str,
    key: &str,
    body: &serde_json::Value,
    limit: Duration,
) -> Retried {
    let client = reqwest::Client::new();
    let started = Instant::now();
    let mut conflicts = 0;
    loop {
        assert!(
            started.elapsed() < limit,
            "no answer for key {key} within {limit:?} ({conflicts} × 409)"
        );
        let sent = client
            .post(format!("{shop}/orders"))
            .bearer_auth("client")
            .header("idempotency-key", key)
            .json(body)
            .timeout(Duration::from_secs(5))
            .send()
            .await;
        let Ok(answer) = sent else {
            tokio::time::sleep(Duration::from_millis(50)).await;
            continue;
        };
        if answer.status() == StatusCode::CONFLICT {
            conflicts += 1;
            tokio::time::sleep(Duration::from_millis(100)).await;
            continue;
        }
        let replayed = answer.headers().contains_key("idempotent-replayed");
        let status = answer.status().as_u16();
        let body = answer.json().await.unwrap_or_default();
        return Retried {
            status,
            body,
            replayed,
            conflicts,
            took: started.elapsed(),
        };
    }
}

/// The shop's server process, killed where it hangs (a stop point), or left running.
fn server<B: Broker>(stage: &Stage<B>, port: u16) -> Running {
    let env = [
        (PAYMENTS, stage.downstream.payments.clone()),
        (PORT, port.to_string()),
    ];
    Running(stage.rig.child(&stage.name, "shop_server", &env))
}

/// A free loopback port for the shop's server.
fn free_port() -> u16 {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    listener.local_addr().unwrap().port()
}

/// A request whose server process is SIGKILLed between two steps (after the charge's call and
/// before its journal, after the charge's journal, after the reserve step's) is answered on the
/// client's retry with the same key once the lease ended: the steps finished before the kill
/// are replayed, not run (payments sees a second request only where the charge's journal was
/// cut, and answers it from its keys), the reservation and the order exist once, the journal
/// is gone with the answer, and the 409s stop at the lease.
pub async fn a_request_killed_between_steps_resumes_on_the_retry_after_the_lease<B: Broker>(
    name: &str,
) {
    let stage = Stage::<B>::open(name).await;
    let keys = shop_keys(&stage.rig.tag);
    for table in [format!("{keys}_steps"), keys.clone()] {
        stage
            .rig
            .db
            .exec(format!("DROP TABLE IF EXISTS {table}"))
            .await;
    }
    let store = SqlKeyStore::with_table(stage.rig.db.pool.clone(), &keys).unwrap();
    store.migrate().await.unwrap();
    for (n, point) in ["charge:called", "charge:journaled", "reserve:journaled"]
        .into_iter()
        .enumerate()
    {
        let event = format!("ord_{n}");
        let at = format!("{event} (killed at {point})");
        let key = format!("key-{n}");
        let body = serde_json::json!({ "event": event, "stop_at": point });
        let port = free_port();
        let shop = format!("http://127.0.0.1:{port}");
        let mut first = server(&stage, port);
        let (shop_, key_, body_) = (shop.clone(), key.clone(), body.clone());
        let cut = tokio::spawn(async move {
            order_until_answered(&shop_, &key_, &body_, Duration::from_secs(30)).await
        });
        let points = format!(
            "{} WHERE event = '{event}' AND point = '{point}'",
            stage.tables.points
        );
        stage
            .rig
            .until(
                Duration::from_secs(30),
                &format!("{at}: reaches its stop"),
                || async { stage.count(&points, None).await > 0 },
            )
            .await;
        first.0.kill().expect("SIGKILL the shop");
        first.0.wait().unwrap();
        cut.abort();
        let killed = Instant::now();
        let _second = server(&stage, port);
        let retried = order_until_answered(&shop, &key, &body, Duration::from_secs(30)).await;
        assert_eq!(retried.status, 201, "{at}: {}", retried.body);
        assert!(!retried.replayed, "{at}: the retry ran the request's rest");
        assert!(
            killed.elapsed() < LEASE * 5,
            "{at}: answered {:?} after the kill, the lease being {LEASE:?}",
            killed.elapsed()
        );
        let charges = stage.count(&stage.downstream.charges, Some(&event)).await;
        let requests = stage.downstream.charge_requests(&event).len();
        let reservations = stage.count(&stage.tables.reservations, Some(&event)).await;
        let orders = stage.count(&stage.tables.orders, Some(&event)).await;
        let cut_mid_call = point == "charge:called";
        assert_eq!(charges, 1, "{at}: one charge at payments");
        assert_eq!(
            requests,
            1 + usize::from(cut_mid_call),
            "{at}: charge requests"
        );
        assert_eq!((reservations, orders), (1, 1), "{at}: reservations, orders");
        assert_eq!(
            retried.body["charge"].as_str().map(str::to_owned),
            Some(format!("ch_{}", charge_id(&stage, &event).await)),
            "{at}: the answer carries the one charge"
        );
        let again = order_until_answered(&shop, &key, &body, Duration::from_secs(5)).await;
        assert!(again.replayed, "{at}: a later retry is a replay");
        assert_eq!(again.body, retried.body, "{at}: the same answer");
        eprintln!(
            "{at}: answered {:?} after the kill, {} × 409 meanwhile",
            retried.took, retried.conflicts
        );
    }
    let journal = stage.count(&format!("{keys}_steps"), None).await;
    assert_eq!(journal, 0, "every journal went with its answer");
}

/// The id of the one charge payments made for `event`.
async fn charge_id<B: Broker>(stage: &Stage<B>, event: &str) -> i64 {
    let charges = &stage.downstream.charges;
    let query = format!("SELECT id FROM {charges} WHERE event = '{event}'");
    stage.rig.db.scalar(query).await
}
