//! Services that start together: on a fresh PostgreSQL database every instance's schema step
//! succeeds, whichever runs first; and the line each service prints means it is ready.

#![allow(unreachable_pub)] // a test crate has no public API

mod common;

use std::sync::Arc;

use guestlist::sqlx::PgPool;
use tokio::sync::Barrier;
use warehouse_example::broker::Orders;
use warehouse_example::ready::Readiness;
use warehouse_example::{payments, warehouse};

use common::{FreshDatabase, PAYMENTS_READY, Service, WAREHOUSE_READY, nats_url};

/// Without turns, two instances on a fresh database collide in PostgreSQL's catalog nine times
/// in ten; four instances, this many times over, leave no room for luck.
const ROUNDS: usize = 8;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn instances_starting_together_on_a_fresh_database_all_create_their_tables() {
    for round in 0..ROUNDS {
        let database =
            FreshDatabase::create(&format!("guestlist_wh_together_{}", std::process::id())).await;
        let start = Arc::new(Barrier::new(4));
        let instances: Vec<_> = (0..4)
            .map(|instance| {
                let (url, start) = (database.url.clone(), start.clone());
                tokio::spawn(async move {
                    let pool = PgPool::connect(&url).await.unwrap();
                    start.wait().await;
                    // Two warehouses and two payments, as a deployment starts them.
                    if instance % 2 == 0 {
                        warehouse::migrate(&pool).await
                    } else {
                        payments::migrate(&pool).await
                    }
                })
            })
            .collect();
        for (instance, started) in instances.into_iter().enumerate() {
            if let Err(err) = started.await.unwrap() {
                panic!("round {round}: instance {instance}'s schema step failed: {err:#}");
            }
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_warehouses_and_two_payments_start_at_once_and_each_line_means_ready() {
    let database =
        FreshDatabase::create(&format!("guestlist_wh_at_once_{}", std::process::id())).await;
    let orders = Orders::new(nats_url(), format!("WH_AT_ONCE_{}", std::process::id()));
    orders.remove().await.unwrap();
    let payments_url = "http://127.0.0.1:9"; // never called: nothing is published
    // Service::start checks /readyz at once after each line.
    let (first, second, third, fourth) = tokio::join!(
        Service::start(
            common::warehouse(&database.url, &orders, payments_url, false),
            WAREHOUSE_READY
        ),
        Service::start(
            common::warehouse(&database.url, &orders, payments_url, false),
            WAREHOUSE_READY
        ),
        Service::start(common::payments(&database.url), PAYMENTS_READY),
        Service::start(common::payments(&database.url), PAYMENTS_READY),
    );
    // The line came after the tables and the consumer: both usable at once.
    let context = async_nats::jetstream::new(async_nats::connect(&orders.url).await.unwrap());
    let stream = context.get_stream(&orders.name).await.unwrap();
    let consumer = stream.consumer_info("warehouse").await.unwrap();
    assert_eq!(consumer.config.durable_name.as_deref(), Some("warehouse"));
    let client = reqwest::Client::new();
    for (i, warehouse) in [&first, &second].into_iter().enumerate() {
        let created = client
            .post(format!("{}/orders", warehouse.url))
            .header("idempotency-key", format!("order-{i}"))
            .header("authorization", "Bearer shop")
            .json(&serde_json::json!({ "amount": 1200 }))
            .send()
            .await
            .unwrap();
        assert_eq!(created.status(), 201, "the warehouse's tables are there");
    }
    for payments in [&third, &fourth] {
        let charged = client
            .post(format!("{}/v1/charges", payments.url))
            .header("idempotency-key", "charge-1")
            .header("authorization", "Bearer warehouse")
            .json(&serde_json::json!({ "order": 1, "amount": 1200 }))
            .send()
            .await
            .unwrap();
        assert_eq!(charged.status(), 201, "payments' tables are there");
    }
    for service in [first, second, third, fourth] {
        service.sigterm().await;
    }
    orders.remove().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn readyz_says_what_a_starting_service_waits_for_and_when_its_database_is_down() {
    let readiness = Readiness::waiting_for("its tables");
    let api = axum::Router::new().route("/orders", axum::routing::post(|| async { "created" }));
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    let app = readiness.gate(api);
    tokio::spawn(async move { axum::serve(listener, app).await });
    let client = reqwest::Client::new();
    let readyz = || client.get(format!("{url}/readyz")).send();
    let order = || client.post(format!("{url}/orders")).send();

    let not_yet = readyz().await.unwrap();
    assert_eq!(not_yet.status(), 503);
    assert_eq!(
        not_yet.text().await.unwrap(),
        "starting: waiting for its tables\n"
    );
    readiness.now_waiting_for("its broker consumer");
    let not_yet = order().await.unwrap();
    assert_eq!(not_yet.status(), 503, "the API is closed until ready");
    assert_eq!(not_yet.headers()["retry-after"], "1");
    assert!(
        not_yet
            .text()
            .await
            .unwrap()
            .contains("its broker consumer")
    );

    readiness.ready();
    assert_eq!(readyz().await.unwrap().status(), 200);
    assert_eq!(order().await.unwrap().text().await.unwrap(), "created");

    // The consumer's database goes away: /readyz says so while it lasts, and comes back.
    let health = guestlist::outbox::Health::new("consumer", "warehouse");
    readiness.watch(health.clone());
    assert_eq!(readyz().await.unwrap().status(), 200);
    health.outage("the database: pool timed out");
    let down = readyz().await.unwrap();
    assert_eq!(down.status(), 503);
    assert_eq!(down.headers()["retry-after"], "1");
    let said = down.text().await.unwrap();
    assert!(
        said.starts_with("waiting out an outage: the database: pool timed out (for "),
        "{said}"
    );
    health.recovered();
    assert_eq!(readyz().await.unwrap().status(), 200);
}
