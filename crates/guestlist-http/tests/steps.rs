//! Steps behind the layer's transactional mode on PostgreSQL (DESIGN 4d): a request that failed
//! between steps (answered 5xx, its key released) resumes on the retry after the steps it
//! finished; its journal is another request's for a key reused with another body; and the
//! extractor refuses what it cannot journal. (A request whose server process dies between
//! steps: the steps stories of the testkit, `a_request_killed_between_steps_resumes_on_the_retry_after_the_lease`.)

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};

use axum::Router;
use axum::extract::State;
use axum::http::StatusCode;
use axum::routing::post;
use guestlist_http::{IdempotencyLayer, IdempotentSteps};
use guestlist_sqlx::SqlKeyStore;
use guestlist_testkit::Database;
use sqlx::Postgres;

#[derive(Clone, Default)]
struct Shop {
    charges: Arc<AtomicUsize>,
    /// Whether the reserve step fails its next run.
    out_of_stock: Arc<AtomicBool>,
    reservations: Arc<str>,
}

/// `POST /orders`: charge (counted), reserve (a row; fails while out of stock), then 201.
async fn place_order(
    State(shop): State<Shop>,
    mut steps: IdempotentSteps<Postgres>,
    body: String,
) -> (StatusCode, String) {
    let placed = async {
        let charge: String = steps
            .external("charge", || async {
                let n = shop.charges.fetch_add(1, Ordering::SeqCst) + 1;
                Ok::<_, anyhow::Error>(format!("ch_{n}"))
            })
            .await?;
        steps
            .database("reserve", async |tx| {
                anyhow::ensure!(
                    !shop.out_of_stock.swap(false, Ordering::SeqCst),
                    "out of stock"
                );
                let insert = format!("INSERT INTO {} (body) VALUES ($1)", shop.reservations);
                sqlx::query(sqlx::AssertSqlSafe(insert))
                    .bind(&body)
                    .execute(&mut *tx)
                    .await?;
                Ok(())
            })
            .await?;
        let _final_writes = steps.transaction().await?;
        Ok::<_, anyhow::Error>(charge)
    };
    match placed.await {
        Ok(charge) => (StatusCode::CREATED, charge),
        Err(err) => (StatusCode::SERVICE_UNAVAILABLE, format!("{err:#}")),
    }
}

struct Stage {
    db: Database<Postgres>,
    keys: SqlKeyStore<Postgres>,
    shop: Shop,
    base: String,
}

impl Stage {
    async fn open(
        tag: &str,
        layer: impl Fn(
            SqlKeyStore<Postgres>,
        ) -> IdempotencyLayer<guestlist_http::Transactional<Postgres>>,
    ) -> Self {
        let db = Database::<Postgres>::open(8).await;
        let keys_table = format!("hs_{tag}");
        let reservations = format!("hs_res_{tag}");
        for table in [
            format!("{keys_table}_steps"),
            keys_table.clone(),
            reservations.clone(),
        ] {
            db.exec(format!("DROP TABLE IF EXISTS {table}")).await;
        }
        db.exec(format!("CREATE TABLE {reservations} (body TEXT NOT NULL)"))
            .await;
        let keys = SqlKeyStore::with_table(db.pool.clone(), &keys_table).unwrap();
        keys.migrate().await.unwrap();
        let shop = Shop {
            reservations: Arc::from(reservations.as_str()),
            ..Shop::default()
        };
        let app = Router::new()
            .route("/orders", post(place_order))
            .with_state(shop.clone())
            .layer(layer(keys.clone()));
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let base = format!("http://{}/orders", listener.local_addr().unwrap());
        tokio::spawn(async move { axum::serve(listener, app).await });
        Self {
            db,
            keys,
            shop,
            base,
        }
    }

    async fn order(&self, key: Option<&str>, body: &str) -> (u16, String) {
        let mut request = reqwest::Client::new()
            .post(&self.base)
            .header("authorization", "Bearer client")
            .body(body.to_owned());
        if let Some(key) = key {
            request = request.header("idempotency-key", key);
        }
        let answer = request.send().await.unwrap();
        (answer.status().as_u16(), answer.text().await.unwrap())
    }

    async fn count(&self, table: String) -> i64 {
        self.db
            .scalar(format!("SELECT count(*) FROM {table}"))
            .await
    }
}

/// A reserve step that fails answers 503 and releases the key; the retry with the same key and
/// body replays the charge from the journal (one charge in all) and runs the reserve step, and
/// the journal goes with the stored answer.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_request_answered_5xx_between_steps_resumes_on_the_retry() {
    let stage = Stage::open("resume", IdempotencyLayer::transactional).await;
    stage.shop.out_of_stock.store(true, Ordering::SeqCst);
    let failed = stage.order(Some("order-1"), "mug").await;
    assert_eq!(failed.0, 503, "{}", failed.1);
    assert!(failed.1.contains("out of stock"), "{}", failed.1);
    let journal = format!("{}_steps", stage.keys.table());
    assert_eq!(
        stage.count(journal.clone()).await,
        2,
        "the run and the charge stay"
    );
    let retried = stage.order(Some("order-1"), "mug").await;
    assert_eq!(retried, (201, "ch_1".to_owned()), "the journaled charge");
    assert_eq!(stage.shop.charges.load(Ordering::SeqCst), 1, "one charge");
    let reservations = format!("{}", stage.shop.reservations);
    assert_eq!(stage.count(reservations).await, 1, "one reservation");
    assert_eq!(
        stage.count(journal).await,
        0,
        "the journal went with the answer"
    );
    let again = stage.order(Some("order-1"), "mug").await;
    assert_eq!(again, retried, "a replay");
    assert_eq!(stage.shop.charges.load(Ordering::SeqCst), 1);
}

/// A key released after a failure and sent again with another body gets 422 while the journal
/// holds the first request's charge; the first request's own retry still finishes it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_released_key_reused_for_another_request_replays_nothing_of_the_first() {
    let stage = Stage::open("reuse", IdempotencyLayer::transactional).await;
    stage.shop.out_of_stock.store(true, Ordering::SeqCst);
    assert_eq!(stage.order(Some("order-2"), "mug").await.0, 503);
    let other = stage.order(Some("order-2"), "teapot").await;
    assert_eq!(other.0, 422, "{}", other.1);
    assert!(other.1.contains("new key"), "says what to do: {}", other.1);
    let first = stage.order(Some("order-2"), "mug").await;
    assert_eq!(first, (201, "ch_1".to_owned()));
    assert_eq!(stage.shop.charges.load(Ordering::SeqCst), 1, "one charge");
}

/// Steps need a key to journal under, and a claim committed on its own: a keyless request gets
/// 400, and a layer with `claim_in_transaction` 500, each saying why, and nothing runs.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn steps_refuse_a_keyless_request_and_a_claim_on_the_transaction() {
    let keyless = Stage::open("keyless", |keys| {
        IdempotencyLayer::transactional(keys).require_key(false)
    })
    .await;
    let (status, body) = keyless.order(None, "mug").await;
    assert_eq!(status, 400, "{body}");
    assert!(body.contains("Idempotency-Key"), "{body}");
    let locked = Stage::open("locked", |keys| {
        IdempotencyLayer::transactional(keys).claim_in_transaction()
    })
    .await;
    let (status, body) = locked.order(Some("order-3"), "mug").await;
    assert_eq!(status, 500, "{body}");
    assert!(body.contains("claim_in_transaction"), "{body}");
    let charges =
        keyless.shop.charges.load(Ordering::SeqCst) + locked.shop.charges.load(Ordering::SeqCst);
    assert_eq!(charges, 0, "no step ran");
}
