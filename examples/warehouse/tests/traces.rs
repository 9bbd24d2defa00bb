//! One event, one trace: `POST /orders` → the outbox → the relay → NATS → the warehouse's
//! handler → the charge it carries to payments, each hop's span the child of the one before,
//! as three processes export them over OTLP/HTTP to a receiver in this test.

#![allow(unreachable_pub)] // a test crate has no public API

mod common;

use std::time::Duration;

use guestlist_testkit::otlp::{Collector, ancestry};
use guestlist_testkit::short_tag;
use tokio::process::Command;
use warehouse_example::broker::Orders;

use common::{
    PAYMENTS_READY, RELAY_READY, Service, WAREHOUSE_READY, nats_url, payments, relay, warehouse,
};

/// The trace the test's own request starts (W3C's example trace id).
const TRACE_ID: &str = "4bf92f3577b34da6a3ce929d0e0e4736";
const CLIENT_SPAN: &str = "00f067aa0ba902b7";

/// `command` exporting its spans to `collector`, in batches sent every 100 ms.
fn exporting(mut command: Command, collector: &str) -> Command {
    command
        .env("OTEL_EXPORTER_OTLP_ENDPOINT", collector)
        .env("OTEL_BSP_SCHEDULE_DELAY", "100");
    command
}

#[tokio::test(flavor = "multi_thread")]
async fn one_order_makes_one_trace_from_post_orders_to_the_charge_it_carries() {
    let collector = Collector::start().await;
    let orders = Orders::new(
        nats_url(),
        format!("WH_{}", short_tag("traces").to_uppercase()),
    );
    orders.remove().await.unwrap();
    let dir = tempfile::tempdir().unwrap();
    let db = |name: &str| format!("sqlite:{}", dir.path().join(name).display());
    let pay = Service::start(
        exporting(payments(&db("payments.db")), &collector.url),
        PAYMENTS_READY,
    )
    .await;
    let shop = Service::start(
        exporting(
            warehouse(&db("warehouse.db"), &orders, &pay.url, false),
            &collector.url,
        ),
        WAREHOUSE_READY,
    )
    .await;
    let relay = Service::start_without_api(
        exporting(relay(&db("warehouse.db"), &orders, "5s"), &collector.url),
        RELAY_READY,
    )
    .await;

    // The shop's request, in a trace of the test's own.
    let created = reqwest::Client::new()
        .post(format!("{}/orders", shop.url))
        .header("idempotency-key", "order-traced")
        .header("authorization", "Bearer shop-frontend")
        .header("traceparent", format!("00-{TRACE_ID}-{CLIENT_SPAN}-01"))
        .json(&serde_json::json!({ "amount": 1200 }))
        .send()
        .await
        .unwrap();
    assert_eq!(created.status(), 201);

    // The charge's span at payments arrives last; the chain is read from it upwards.
    let deadline = tokio::time::Instant::now() + Duration::from_secs(60);
    let (charge, all) = loop {
        let all = collector.spans();
        let charge = all
            .iter()
            .find(|s| s.service == "payments" && s.attribute("url.path") == Some("/v1/charges"));
        if let Some(charge) = charge
            && ancestry(&all, charge).len() >= 7
        {
            break (charge.clone(), all);
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "no whole chain for the charge within 60 s; received: {:#?}",
            all.iter()
                .map(|s| (&s.service, &s.name, &s.id, &s.parent))
                .collect::<Vec<_>>()
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    let chain = ancestry(&all, &charge);
    // Each hop, told by what it says of itself (its service, and an attribute, or its name,
    // with its value or any), nearest first.
    let hops = [
        ("payments", "url.path", Some("/v1/charges")),
        ("warehouse", "guestlist.step", None),
        ("warehouse", "name", Some("guestlist.step")),
        ("warehouse", "name", Some("handler")),
        ("warehouse", "messaging.operation.type", Some("process")),
        ("warehouse-relay", "messaging.operation.type", Some("send")),
        ("warehouse", "url.path", Some("/orders")),
    ];
    let names: Vec<(&str, &str)> = chain
        .iter()
        .map(|s| (s.service.as_str(), s.name.as_str()))
        .collect();
    assert_eq!(chain.len(), hops.len(), "one span per hop: {names:#?}");
    for (at, (span, (service, attribute, value))) in chain.iter().zip(hops).enumerate() {
        let said = match attribute {
            "name" => Some(span.name.as_str()),
            _ => span.attribute(attribute),
        };
        assert!(
            span.service == service && said.is_some() && (value.is_none() || said == value),
            "hop {at} of {names:#?} is not {service}'s span with {attribute} {value:?}"
        );
    }
    assert!(
        chain.iter().all(|s| s.trace == TRACE_ID),
        "one trace, the client's: {chain:#?}"
    );
    assert_eq!(
        chain.last().unwrap().parent,
        CLIENT_SPAN,
        "POST /orders is the child of the client's span"
    );

    // What each hop says of itself.
    let [charge, carry, step, _handler, process, send, order] = &chain[..] else {
        unreachable!("seven hops")
    };
    assert_eq!(order.attribute("guestlist.key"), Some("order-traced"));
    assert_eq!(order.attribute("guestlist.outcome"), Some("fresh"));
    assert_eq!(order.attribute("http.request.method"), Some("POST"));
    assert_eq!(
        send.attribute("messaging.destination.name"),
        Some(orders.paid_topic().as_str())
    );
    assert_eq!(send.attribute("guestlist.outcome"), Some("confirmed"));
    let event = send.attribute("messaging.message.id").unwrap().to_owned();
    assert_eq!(
        process.attribute("messaging.message.id"),
        Some(event.as_str())
    );
    assert_eq!(process.attribute("guestlist.outcome"), Some("fresh"));
    assert_eq!(process.attribute("guestlist.delivery_count"), Some("1"));
    let carried = carry.attribute("guestlist.key").unwrap();
    assert!(
        carried.contains(&event) && carried.contains("charge"),
        "the key carried from the event: {carried}"
    );
    assert_eq!(charge.attribute("guestlist.key"), Some(carried));
    assert_eq!(
        step.attribute("step"),
        Some("charge"),
        "the handler's charge step"
    );
    assert_eq!(step.attribute("kind"), Some("external"));
    assert_eq!(charge.attribute("guestlist.outcome"), Some("fresh"));

    relay.sigterm().await;
    shop.sigterm().await;
    pay.sigterm().await;
    orders.remove().await.unwrap();
}
