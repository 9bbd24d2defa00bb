//! The relay race under fire: 500 paid orders, each published four times by plain broker clients
//! (no guestlist code on the publishing side), consumed by two warehouses with PostgreSQL, while
//! payments is SIGKILLed mid-charge and restarted twice and one warehouse is SIGKILLed once.
//!
//! Charges whose claim committed before payments died answer 409 in flight until their lease
//! ends; refused connections while payments is down are "not yet" too. The warehouses defer
//! those messages instead of counting them as poison, so at the end: 500 pick tasks, 500 charge
//! rows, every charge id recorded once, 500 PickTaskCreated in the outbox (the next hop's events,
//! written on each claim's transaction), nothing dead-lettered, nothing left on the broker.

#![allow(unreachable_pub)] // a test crate has no public API

mod common;

use std::time::Duration;

use async_nats::jetstream;
use guestlist::sqlx::Postgres;
use guestlist_testkit::Database;
use lapin::options::{BasicPublishOptions, ConfirmSelectOptions};
use lapin::types::ShortString;
use lapin::{BasicProperties, Connection, ConnectionProperties};
use warehouse_example::broker::Orders;

use common::{
    FreshDatabase, PAYMENTS_READY, Service, WAREHOUSE_READY, amqp_url, count, free_address,
    nats_url, payments_on, pending_on_the_broker, reservations_of_picks, until_at_least,
    until_the_broker_is_quiet, warehouse,
};

/// Distinct paid orders.
const ORDERS: i64 = 500;
/// How often each is published.
const COPIES: usize = 4;
/// The payments lease: how long a charge whose attempt died stays locked. Longer than the
/// warehouse's whole poison budget (5 deliveries, backoff 0.5 s doubling: about 8 s), so that a
/// consumer counting each 409 as a failure would dead-letter the paid order.
const LEASE: &str = "20s";
/// How long the broker must show nothing pending before the warehouses stop: longer than any
/// wait a message handed back is held for.
const QUIET: Duration = Duration::from_secs(4);
/// How long a whole run may take before the test gives up.
const RUN_FOR: Duration = Duration::from_secs(180);

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn five_hundred_orders_through_crashes_on_nats() {
    let orders = Orders::new(nats_url(), format!("WH_CHAOS_{}", std::process::id()));
    relay_race_under_fire(orders, "nats").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn five_hundred_orders_through_crashes_on_rabbitmq() {
    let orders = Orders::new(amqp_url(), format!("wh_chaos_{}", std::process::id()));
    relay_race_under_fire(orders, "rabbitmq").await;
}

async fn relay_race_under_fire(orders: Orders, broker: &str) {
    let database = FreshDatabase::create(&format!(
        "guestlist_wh_chaos_{broker}_{}",
        std::process::id()
    ))
    .await;
    let db = Database::<Postgres>::attach(&database.url, 2).await;
    orders.remove().await.unwrap();
    orders.declare().await.unwrap();

    // Payments keeps its address across restarts, as a service behind a fixed name does.
    let listen = free_address();
    let start_payments = || {
        let mut command = payments_on(&database.url, &listen);
        // Each charge takes a moment before it commits, so that a kill lands mid-charge.
        command.args(["--lease", LEASE, "--charge-takes", "20ms"]);
        Service::start(command, PAYMENTS_READY)
    };
    let mut payments = start_payments().await;
    let payments_url = format!("http://{listen}");
    let start_warehouse = || {
        Service::start(
            warehouse(&database.url, &orders, &payments_url, false),
            WAREHOUSE_READY,
        )
    };
    let mut first = start_warehouse().await;
    let second = start_warehouse().await;

    let publishing = tokio::spawn(publish_with_plain_clients(orders.clone()));
    let picked = "SELECT count(*) FROM pick_tasks";
    let in_flight = "SELECT count(*) FROM payments_keys WHERE status IS NULL";
    let mut stranded = 0;
    for at in [100, 250] {
        until_at_least(&db, picked, at, RUN_FOR).await;
        payments.sigkill().await;
        // Claims committed by charges that died with it: locked until their lease ends.
        stranded += count(&db, in_flight).await;
        tokio::time::sleep(Duration::from_millis(500)).await; // refused connections meanwhile
        payments = start_payments().await;
    }
    until_at_least(&db, picked, 350, RUN_FOR).await;
    first.sigkill().await;
    first = start_warehouse().await;
    publishing.await.unwrap();
    until_at_least(&db, picked, ORDERS, RUN_FOR).await;

    // Let redeliveries of copies already handled drain (a message handed back waits up to the
    // lease), until the broker has shown nothing pending for a while; then stop cleanly.
    until_the_broker_is_quiet(&orders, QUIET, RUN_FOR).await;
    first.sigterm().await;
    second.sigterm().await;

    eprintln!("{broker}: {stranded} charges were mid-flight when payments was killed");
    assert_eq!(count(&db, picked).await, ORDERS, "one pick task per order");
    assert_eq!(
        count(&db, "SELECT count(DISTINCT event) FROM pick_tasks").await,
        ORDERS,
        "one pick task per event"
    );
    assert_eq!(
        reservations_of_picks(&db).await,
        ORDERS,
        "one reservation per order"
    );
    assert_eq!(
        count(&db, "SELECT count(*) FROM charges").await,
        ORDERS,
        "one charge per order, though payments died mid-charge twice"
    );
    assert_eq!(
        count(&db, "SELECT count(DISTINCT order_id) FROM charges").await,
        ORDERS
    );
    assert_eq!(
        count(
            &db,
            "SELECT count(DISTINCT p.charge) FROM pick_tasks p \
             JOIN charges c ON p.charge = 'ch_' || c.id AND c.order_id = p.order_id"
        )
        .await,
        ORDERS,
        "every pick task records its own order's charge, each charge once"
    );
    assert_eq!(
        count(
            &db,
            "SELECT count(DISTINCT message_id) FROM warehouse_outbox"
        )
        .await,
        ORDERS,
        "one PickTaskCreated per event in the outbox, written on the claim's transaction"
    );
    assert_eq!(
        count(&db, "SELECT count(*) FROM warehouse_outbox").await,
        ORDERS,
        "none for the copies the inbox dropped, none for a handling that rolled back"
    );
    assert_eq!(
        pending_on_the_broker(&orders).await,
        Vec::<String>::new(),
        "{broker}: nothing pending, nothing dead-lettered"
    );
    orders.remove().await.unwrap();
}

/// The event of order `n`, as a publisher in another language would write it.
fn event(n: i64) -> (String, Vec<u8>) {
    let id = format!("evt_chaos_{n}");
    let payload = format!(r#"{{"id":"{id}","order":{n},"amount":{}}}"#, 1_000 + n);
    (id, payload.into_bytes())
}

/// Every order, `COPIES` times: two copies back to back (the two warehouses race on them), then
/// the same again, published with the broker's own client and confirmed by the broker.
async fn publish_with_plain_clients(orders: Orders) {
    let sends: Vec<i64> = (0..COPIES / 2)
        .flat_map(|_| (1..=ORDERS).flat_map(|n| [n, n]))
        .collect();
    if orders.is_nats() {
        let client = async_nats::connect(&orders.url).await.unwrap();
        let stream = jetstream::new(client);
        for chunk in sends.chunks(100) {
            let mut acks = Vec::new();
            for &n in chunk {
                let (_, payload) = event(n);
                acks.push(
                    stream
                        .publish(orders.subject(), payload.into())
                        .await
                        .unwrap(),
                );
            }
            for ack in acks {
                ack.await.expect("the stream stored the event");
            }
        }
    } else {
        let connection = Connection::connect(&orders.url, ConnectionProperties::default())
            .await
            .unwrap();
        let channel = connection.create_channel().await.unwrap();
        channel
            .confirm_select(ConfirmSelectOptions::default())
            .await
            .unwrap();
        for chunk in sends.chunks(100) {
            let mut confirms = Vec::new();
            for &n in chunk {
                let (id, payload) = event(n);
                let properties = BasicProperties::default()
                    .with_message_id(ShortString::from(id))
                    .with_delivery_mode(2);
                confirms.push(
                    channel
                        .basic_publish(
                            ShortString::from(""),
                            ShortString::from(orders.name.as_str()),
                            BasicPublishOptions::default(),
                            &payload,
                            properties,
                        )
                        .await
                        .unwrap(),
                );
            }
            for confirm in confirms {
                confirm.await.expect("the queue stored the event");
            }
        }
        let _ = connection.close(200, ShortString::from("published")).await;
    }
}
