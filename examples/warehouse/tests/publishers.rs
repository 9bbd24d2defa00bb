//! Publishers that are not ours: ordinary clients in other languages publish `OrderPaid` with
//! the event's id where their client puts ids (AMQP `message_id`, `Nats-Msg-Id`) and none in
//! the JSON. The warehouse picks each event once, under that id.
//!
//! The publishing here is plain lapin and async-nats with nothing of guestlist's, as
//! `README.md`'s pika and nats-py examples publish.

#![allow(unreachable_pub)] // a test crate has no public API

mod common;

use guestlist_testkit::short_tag;
use lapin::options::{BasicPublishOptions, ConfirmSelectOptions};
use lapin::types::ShortString;
use lapin::{BasicProperties, Connection, ConnectionProperties};
use warehouse_example::broker::Orders;

use common::{
    Service, WAREHOUSE_READY, amqp_url, count, eventually, nats_url, sqlite_file, start_payments,
    warehouse,
};

/// The body a publisher in another language sends: no `id` in it.
const BODY: &[u8] = br#"{"order": 7, "amount": 1200}"#;

/// Starts payments and a warehouse on SQLite files, then publishes with `publish` (given the
/// event's id) twice the same event and once another, and checks that the warehouse picked each
/// event once, under the id the client gave it.
async fn picked_once_under_the_clients_id(orders: Orders, publish: impl AsyncFn(&Orders, &str)) {
    orders.remove().await.unwrap();
    let dir = tempfile::tempdir().unwrap();
    let warehouse_db = sqlite_file(&dir, "warehouse.db").await;
    let payments_db = sqlite_file(&dir, "payments.db").await;
    let payments = start_payments(payments_db.pool.clone()).await;
    let service = Service::start(
        warehouse(&warehouse_db.url, &orders, &payments, false),
        WAREHOUSE_READY,
    )
    .await;
    publish(&orders, "evt_plain_1").await;
    publish(&orders, "evt_plain_1").await;
    publish(&orders, "evt_plain_2").await;
    // One at a time, in order: once the second event is picked, the copy has been handled.
    eventually(&warehouse_db, "SELECT count(*) FROM pick_tasks", 2).await;
    service.sigterm().await;
    for event in ["evt_plain_1", "evt_plain_2"] {
        let picked = format!("SELECT count(*) FROM pick_tasks WHERE event = '{event}'");
        assert_eq!(
            count(&warehouse_db, &picked).await,
            1,
            "{event}: picked once, under the client's id"
        );
    }
    assert_eq!(count(&payments_db, "SELECT count(*) FROM charges").await, 2);
    orders.remove().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_amqp_client_that_sets_only_message_id() {
    let orders = Orders::new(amqp_url(), "wh_plain_amqp_client");
    picked_once_under_the_clients_id(orders, async |orders: &Orders, id: &str| {
        let connection = Connection::connect(&orders.url, ConnectionProperties::default())
            .await
            .unwrap();
        let channel = connection.create_channel().await.unwrap();
        channel
            .confirm_select(ConfirmSelectOptions::default())
            .await
            .unwrap();
        // pika: channel.basic_publish(exchange="", routing_key="ORDERS", body=body,
        //     properties=pika.BasicProperties(message_id=id, delivery_mode=2))
        channel
            .basic_publish(
                ShortString::from(""),
                ShortString::from(orders.name.as_str()),
                BasicPublishOptions::default(),
                BODY,
                BasicProperties::default()
                    .with_message_id(ShortString::from(id))
                    .with_delivery_mode(2),
            )
            .await
            .unwrap()
            .await
            .unwrap();
        connection
            .close(200, ShortString::from("published"))
            .await
            .unwrap();
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_nats_client_that_sets_only_nats_msg_id() {
    let orders = Orders::new(
        nats_url(),
        format!("WH_{}", short_tag("plain_nats_client").to_uppercase()),
    );
    picked_once_under_the_clients_id(orders, async |orders: &Orders, id: &str| {
        let client = async_nats::connect(&orders.url).await.unwrap();
        let jetstream = async_nats::jetstream::new(client);
        // nats-py: await js.publish("orders.paid", body, headers={"Nats-Msg-Id": id})
        let mut headers = async_nats::HeaderMap::new();
        headers.insert("Nats-Msg-Id", id);
        jetstream
            .publish_with_headers(orders.subject(), headers, BODY.into())
            .await
            .unwrap()
            .await
            .unwrap();
    })
    .await;
}
