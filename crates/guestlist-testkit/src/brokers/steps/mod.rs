//! The steps stories (DESIGN 4d): a three-step warehouse (charge through HTTP to payments,
//! reserve in the database, email to a sink) fed by a real broker on PostgreSQL, its consumer
//! process killed at each step boundary, run twice at once, and stopped past its lease. Each
//! counts effects at every downstream.

/// The warehouse's downstreams: payments behind guestlist's layer, and an email sink.
pub mod downstream;
/// The HTTP layer's steps: a shop API killed between two steps.
pub mod shop;
/// The stories.
pub mod stories;
/// The warehouse's step handler, and where a run can be stopped.
pub mod warehouse;

use std::time::Duration;

use guestlist_consumer::{Consumer, IdFrom};
use guestlist_core::HandlerName;
use sqlx::Postgres;

use crate::brokers::child::parent;
use crate::brokers::{Broker, Rig};
use warehouse::{AtPoint, Tables, Warehouse};

pub use shop::{a_request_killed_between_steps_resumes_on_the_retry_after_the_lease, shop_server};
pub use stories::*;

/// The stories' ack wait and step lease: short, so that a killed run's message comes back, and
/// its lease lapses, within a couple of seconds.
pub const LEASE: Duration = Duration::from_secs(2);

/// The environment variables a steps child reads its downstreams and settings from.
const PAYMENTS: &str = "GUESTLIST_STEPS_PAYMENTS";
const EMAIL: &str = "GUESTLIST_STEPS_EMAIL";
const PAUSE_MS: &str = "GUESTLIST_STEPS_PAUSE_MS";
const BATCH: &str = "GUESTLIST_STEPS_BATCH";
const TOGETHER: &str = "GUESTLIST_STEPS_TOGETHER";

/// The consumer process of the steps stories (a child test): the warehouse in steps, until
/// SIGTERM; then it writes what it handled into the story's `handled_` table.
pub async fn steps_consumer<B: Broker>() {
    let Some((tag, url)) = parent("steps_consumer") else {
        return;
    };
    let rig = Rig::<B, Postgres>::attach(&tag, &url, LEASE).await;
    let var = |name: &str| std::env::var(name).unwrap_or_default();
    let at_point = match var(PAUSE_MS).parse() {
        Ok(ms) => AtPoint::Pause(Duration::from_millis(ms)),
        Err(_) => AtPoint::Hang,
    };
    let tables = Tables::of(&tag);
    let warehouse = Warehouse::new(
        var(PAYMENTS),
        var(EMAIL),
        tables.clone(),
        rig.db.pool.clone(),
        at_point,
    );
    let consumer = Consumer::with_steps(
        rig.broker.source().await,
        rig.db.pool.clone(),
        rig.inbox.clone().step_lease(LEASE),
        HandlerName::new("warehouse").unwrap(),
        IdFrom::JsonField("/id".to_owned()),
        warehouse,
    )
    .batch_size(var(BATCH).parse().unwrap_or(10))
    .steps_together(var(TOGETHER) == "true")
    // Side by side, each kill redelivers the whole batch in hand.
    .max_deliveries(if var(TOGETHER) == "true" { 20 } else { 5 })
    .backoff(Duration::from_millis(50), Duration::from_millis(200));
    // Spawned, as a service would: a consumer in steps is `Send`.
    let handled = tokio::spawn(consumer.run(guestlist_consumer::shutdown_signal()))
        .await
        .unwrap()
        .unwrap();
    let record = format!(
        "INSERT INTO handled_{tag} (fresh, duplicates, deferred, failed) VALUES ({}, {}, {}, {})",
        handled.fresh, handled.duplicates, handled.deferred, handled.failed
    );
    rig.db.exec(record).await;
}
