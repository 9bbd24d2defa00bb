//! `POST /orders` with a customer: the customer is the ordering key of the order's `OrderPaid`,
//! and a customer the key cannot carry is refused with what to send, storing nothing.

#![allow(unreachable_pub)] // a test crate has no public API

mod common;

use common::{count, sqlite_file};
use warehouse_example::broker::Orders;
use warehouse_example::warehouse::{self, Topics};

#[tokio::test]
async fn a_customer_orders_its_events_and_a_bad_one_is_refused_storing_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let db = sqlite_file(&dir, "warehouse.db").await;
    warehouse::migrate(&db.pool).await.unwrap();
    let topics = Topics::of(&Orders::new("nats://127.0.0.1:4222", "ORDERS")).unwrap();
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}/orders", listener.local_addr().unwrap());
    let app = warehouse::api(db.pool.clone(), topics).unwrap();
    tokio::spawn(async move { axum::serve(listener, app).await });
    let client = reqwest::Client::new();
    let post = |key: &'static str, body: &'static str| {
        client
            .post(&url)
            .header("idempotency-key", key)
            .header("authorization", "Bearer shop")
            .header("content-type", "application/json")
            .body(body)
            .send()
    };

    for (key, body) in [
        ("k-accent", r#"{"amount":100,"customer":"café"}"#),
        ("k-empty", r#"{"amount":100,"customer":""}"#),
        (
            "k-long",
            concat!(
                r#"{"amount":100,"customer":""#,
                "ccccccccccccccccccccccccccccccccccccccccccccccccccccccccccccccccc",
                r#""}"#
            ),
        ),
    ] {
        let answer = post(key, body).await.unwrap();
        assert_eq!(answer.status(), 422, "{body}");
        assert!(
            answer
                .text()
                .await
                .unwrap()
                .contains("1 to 64 printable ASCII characters")
        );
    }
    assert_eq!(count(&db, "SELECT COUNT(*) FROM orders").await, 0);
    assert_eq!(count(&db, "SELECT COUNT(*) FROM warehouse_outbox").await, 0);

    let answer = post("k-good", r#"{"amount":100,"customer":"c1"}"#)
        .await
        .unwrap();
    assert_eq!(answer.status(), 201);
    let plain = post("k-plain", r#"{"amount":200}"#).await.unwrap();
    assert_eq!(plain.status(), 201);
    assert_eq!(
        count(
            &db,
            "SELECT COUNT(*) FROM warehouse_outbox WHERE ordering_key = 'customer-c1'"
        )
        .await,
        1,
        "the customer's order is keyed by the customer"
    );
    assert_eq!(
        count(
            &db,
            "SELECT COUNT(*) FROM warehouse_outbox WHERE ordering_key LIKE 'order-%'"
        )
        .await,
        1,
        "an order without a customer is a key of its own"
    );
}
