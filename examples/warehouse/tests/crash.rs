//! The design's sequence, for real: the warehouse charges, is killed with SIGKILL before its
//! commit, the broker redelivers, the warehouse charges again with the same carried key, and
//! payments replays the same charge: one charge row, one pick task that records it.
//!
//! Every part is real: the `warehouse` binary as a child process, NATS JetStream or RabbitMQ,
//! payments behind the Idempotency-Key layer, SQLite files or a PostgreSQL database.

#![allow(unreachable_pub)] // a test crate has no public API

mod common;

use guestlist_testkit::{Database, Fixture, short_tag};
use warehouse_example::broker::Orders;
use warehouse_example::db::Shop;
use warehouse_example::picking::CHARGED;
use warehouse_example::warehouse::OrderPaid;

use common::{
    FreshDatabase, Service, WAREHOUSE_READY, amqp_url, count, eventually, nats_url, sqlite_file,
    start_payments, warehouse,
};

/// The warehouse binary; once it said it is ready, its tables exist and its consumer is
/// attached, so the test uses its API and publishes at once.
async fn start_warehouse(database: &str, orders: &Orders, payments: &str, hang: bool) -> Service {
    Service::start(warehouse(database, orders, payments, hang), WAREHOUSE_READY).await
}

/// The whole sequence. `warehouse_db` and `payments_db` may be one database.
async fn charge_crash_redeliver<DB: Fixture + Shop>(
    orders: Orders,
    warehouse_db: Database<DB>,
    payments_db: Database<DB>,
) {
    let payments = start_payments(payments_db.pool.clone()).await;
    let client = reqwest::Client::new();

    // A first warehouse that will hang after it charges, before it commits.
    let mut first = start_warehouse(&warehouse_db.url, &orders, &payments, true).await;

    // The warehouse's own API: "create order", retried with one key, creates one order.
    let mut ids = Vec::new();
    for attempt in 0..2 {
        let response = client
            .post(format!("{}/orders", first.url))
            .header("idempotency-key", "order-1")
            .header("authorization", "Bearer shop-frontend")
            .json(&serde_json::json!({ "amount": 1200 }))
            .send()
            .await
            .unwrap();
        assert_eq!(response.status(), 201, "attempt {attempt}");
        assert_eq!(
            response.headers().contains_key("idempotent-replayed"),
            attempt == 1,
            "the retry is the replay"
        );
        let order: serde_json::Value = response.json().await.unwrap();
        ids.push(order["id"].as_i64().unwrap());
    }
    assert_eq!(ids[0], ids[1], "a retried create returns the same order");
    let order = ids[0];
    assert_eq!(count(&warehouse_db, "SELECT COUNT(*) FROM orders").await, 1);

    let paid = OrderPaid {
        id: Some("evt_9f3k".into()),
        order,
        amount: 1200,
        customer: None,
    };
    orders.publish(&paid).await.unwrap();

    // Charge, then SIGKILL before the commit.
    let charge = first.next_line(CHARGED).await.trim().to_owned();
    assert!(charge.starts_with("ch_"), "a charge id: {charge}");
    first.sigkill().await;
    assert_eq!(count(&payments_db, "SELECT COUNT(*) FROM charges").await, 1);
    assert_eq!(
        count(&warehouse_db, "SELECT COUNT(*) FROM pick_tasks").await,
        0,
        "the killed handler's pick task rolled back"
    );
    assert_eq!(
        count(
            &warehouse_db,
            "SELECT COUNT(*) FROM orders WHERE status = 'NEW'"
        )
        .await,
        1,
        "the killed handler's PICKING rolled back"
    );

    // The redelivery, to a warehouse that runs to the end: it charges again with the same key,
    // payments replays the same charge, and the pick task records it.
    let second = start_warehouse(&warehouse_db.url, &orders, &payments, false).await;
    eventually(&warehouse_db, "SELECT COUNT(*) FROM pick_tasks", 1).await;
    let same_charge = format!("SELECT COUNT(*) FROM pick_tasks WHERE charge = '{charge}'");
    assert_eq!(
        count(&warehouse_db, &same_charge).await,
        1,
        "the redelivery got the same charge id back"
    );
    assert_eq!(
        count(&payments_db, "SELECT COUNT(*) FROM charges").await,
        1,
        "one charge row in payments"
    );
    assert_eq!(
        count(
            &warehouse_db,
            "SELECT COUNT(*) FROM orders WHERE status = 'PICKING'"
        )
        .await,
        1
    );

    // The broker delivers evt_9f3k once more, then a second event: the duplicate does nothing,
    // the second event gets a charge of its own (its own key).
    orders.publish(&paid).await.unwrap();
    orders
        .publish(&OrderPaid {
            id: Some("evt_2".into()),
            order,
            amount: 300,
            customer: None,
        })
        .await
        .unwrap();
    eventually(&warehouse_db, "SELECT COUNT(*) FROM pick_tasks", 2).await;
    second.sigterm().await;
    assert_eq!(
        count(
            &warehouse_db,
            "SELECT COUNT(*) FROM pick_tasks WHERE event = 'evt_9f3k'"
        )
        .await,
        1,
        "the duplicate made no second pick task"
    );
    assert_eq!(
        count(&payments_db, "SELECT COUNT(*) FROM charges").await,
        2,
        "one charge per event"
    );
    assert_eq!(
        count(&payments_db, "SELECT COUNT(*) FROM payments_keys").await,
        2,
        "one stored charge response per event"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn charge_sigkill_redelivery_same_charge_nats_sqlite() {
    let orders = Orders::new(
        nats_url(),
        format!("WH_{}", short_tag("nats_sqlite").to_uppercase()),
    );
    orders.remove().await.unwrap();
    let dir = tempfile::tempdir().unwrap();
    let warehouse = sqlite_file(&dir, "warehouse.db").await;
    let payments = sqlite_file(&dir, "payments.db").await;
    charge_crash_redeliver(orders.clone(), warehouse, payments).await;
    orders.remove().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn charge_sigkill_redelivery_same_charge_rabbitmq_postgres() {
    let orders = Orders::new(amqp_url(), "wh_rabbitmq_postgres");
    orders.remove().await.unwrap();
    // A database of its own: the example's tables have fixed names.
    let database = FreshDatabase::create("guestlist_warehouse_example").await;
    let payments = Database::<guestlist::sqlx::Postgres>::attach(&database.url, 2).await;
    let warehouse = Database::<guestlist::sqlx::Postgres>::attach(&database.url, 2).await;
    charge_crash_redeliver(orders.clone(), warehouse, payments).await;
    orders.remove().await.unwrap();
}
