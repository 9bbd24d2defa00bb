//! The checker: once the system has settled, what the clients were told against what the
//! databases and the broker hold. Each anomaly names the history that shows it.

use std::collections::{BTreeMap, BTreeSet};

use guestlist::sqlx::{self, PgPool};
use serde::Serialize;
use warehouse_example::broker::{Kind, Orders};

use crate::clients::Attempt;
use crate::common::pending_on_the_broker;
use crate::order::{self, Ordered};

/// What the checker counted, and what it found wrong.
#[derive(Debug, Default, Serialize)]
pub struct Checked {
    pub keys: usize,
    pub attempts: usize,
    /// Keys a client was told succeeded.
    pub succeeded: usize,
    pub orders: i64,
    pub pick_tasks: i64,
    pub reservations: i64,
    pub charges: i64,
    /// `PickTaskCreated` messages on the broker, repeats included (the relay publishes at least
    /// once), and how many orders they announce.
    pub picks_on_the_broker: usize,
    pub picks_announced: usize,
    /// Each customer's orders in the order they were placed, at the warehouse.
    pub order: Ordered,
    /// Whether the broker keeps a key's order between the two warehouses (Kafka's partitions,
    /// SQS FIFO's groups): orders out of order are then anomalies. NATS and RabbitMQ share one
    /// consumer's or queue's messages between them in no order (the guide says to run one
    /// process per durable consumer for a key's order): there they are counted only.
    pub order_kept_by_the_broker: bool,
    pub anomalies: Vec<String>,
}

/// Checks `history` against the shop's database at `pool` and the broker, where
/// `picks_taken` were taken off already while the run went on.
pub async fn check(
    history: &[Attempt],
    pool: &PgPool,
    orders: &Orders,
    picks_taken: Vec<String>,
) -> Checked {
    let mut checked = Checked {
        attempts: history.len(),
        ..Checked::default()
    };
    let mut by_key: BTreeMap<&str, Vec<&Attempt>> = BTreeMap::new();
    for attempt in history {
        by_key.entry(&attempt.key).or_default().push(attempt);
    }
    checked.keys = by_key.len();
    // Each key's order, as its 2xx answers name it; every 2xx of a key the same, byte for byte.
    let mut told: BTreeMap<i64, &str> = BTreeMap::new();
    for (key, attempts) in &by_key {
        let succeeded: Vec<&&Attempt> = attempts
            .iter()
            .filter(|a| a.status.is_some_and(|s| (200..300).contains(&s)))
            .collect();
        let Some(first) = succeeded.first() else {
            let last = attempts.last().expect("a key has an attempt");
            checked.anomalies.push(format!(
                "{key}: never answered 2xx; its last attempt: {last:?}"
            ));
            continue;
        };
        checked.succeeded += 1;
        if let Some(other) = succeeded.iter().find(|a| a.answer != first.answer) {
            checked.anomalies.push(format!(
                "{key}: two different answers to one key: {first:?} and {other:?}"
            ));
        }
        match serde_json::from_str::<serde_json::Value>(&first.answer)
            .ok()
            .and_then(|v| v["id"].as_i64())
        {
            Some(id) => {
                if let Some(before) = told.insert(id, key) {
                    checked.anomalies.push(format!(
                        "order {id} was told to two keys: {before} and {key}"
                    ));
                }
            }
            None => checked
                .anomalies
                .push(format!("{key}: a 2xx without an order id: {first:?}")),
        }
    }

    let per_order = |sql: &'static str| async move {
        let rows: Vec<(i64, i64)> = sqlx::query_as(sql).fetch_all(pool).await.expect(sql);
        rows.into_iter().collect::<BTreeMap<i64, i64>>()
    };
    let placed: BTreeSet<i64> = per_order("SELECT id::bigint, 1::bigint FROM orders")
        .await
        .into_keys()
        .collect();
    let picks = per_order("SELECT order_id, count(*) FROM pick_tasks GROUP BY order_id").await;
    let reserved = per_order("SELECT order_id, count(*) FROM reservations GROUP BY order_id").await;
    let charges = per_order("SELECT order_id, count(*) FROM charges GROUP BY order_id").await;
    checked.orders = placed.len() as i64;
    checked.pick_tasks = picks.values().sum();
    checked.reservations = reserved.values().sum();
    checked.charges = charges.values().sum();
    for (id, key) in &told {
        let history = || excerpt(&by_key[key]);
        if !placed.contains(id) {
            let h = history();
            checked.anomalies.push(format!(
                "order {id} ({key}) was told placed, and is not:\n{h}"
            ));
        }
        let effects = [
            ("pick task", &picks),
            ("reservation", &reserved),
            ("charge", &charges),
        ];
        for (what, counts) in effects {
            let n = counts.get(id).copied().unwrap_or(0);
            if n != 1 {
                let h = history();
                checked
                    .anomalies
                    .push(format!("order {id} ({key}) has {n} {what}s, not 1:\n{h}"));
            }
        }
    }
    checked.order = order::check(&told, pool).await;
    checked.order_kept_by_the_broker = matches!(orders.kind(), Kind::Kafka | Kind::Sqs);
    if checked.order_kept_by_the_broker {
        for late in &checked.order.out_of_order {
            let history: Vec<String> = late
                .keys
                .iter()
                .map(|key| format!("{key}:\n{}", excerpt(&by_key[key.as_str()])))
                .collect();
            let history = history.join("\n");
            checked.anomalies.push(format!("{}:\n{history}", late.what));
        }
    }
    let effects = picks.keys().chain(reserved.keys()).chain(charges.keys());
    for id in placed.iter().chain(effects) {
        if !told.contains_key(id) {
            checked
                .anomalies
                .push(format!("order {id} has effects, and no client was told it"));
        }
    }

    for (what, sql) in [
        (
            "messages pending in the outbox",
            "SELECT count(*) FROM warehouse_outbox",
        ),
        (
            "keys still in flight at the shop",
            "SELECT count(*) FROM warehouse_keys WHERE status IS NULL",
        ),
        (
            "keys still in flight at payments",
            "SELECT count(*) FROM payments_keys WHERE status IS NULL",
        ),
        (
            "incoming dead letters",
            "SELECT count(*) FROM warehouse_inbox_dead",
        ),
        (
            "outgoing dead letters",
            "SELECT count(*) FROM warehouse_outbox_dead",
        ),
    ] {
        let n: i64 = sqlx::query_scalar(sql).fetch_one(pool).await.expect(sql);
        if n != 0 {
            checked.anomalies.push(format!("{n} {what} once settled"));
        }
    }
    let reasons: Vec<(String, i64)> = sqlx::query_as(
        "SELECT reason, count(*) FROM warehouse_inbox_dead GROUP BY reason ORDER BY 2 DESC LIMIT 5",
    )
    .fetch_all(pool)
    .await
    .expect("the dead letters' reasons");
    for (reason, n) in reasons {
        checked
            .anomalies
            .push(format!("{n} dead-lettered with the reason: {reason}"));
    }
    picks_on_the_broker(&mut checked, &told, orders, picks_taken).await;
    for left in pending_on_the_broker(orders).await {
        checked
            .anomalies
            .push(format!("on the broker once settled: {left}"));
    }
    checked
}

/// The broker's effects: each order a client was told placed has its `PickTaskCreated` on the
/// broker (once or more, `taken` off it already or still there), and none is there for another
/// order.
async fn picks_on_the_broker(
    checked: &mut Checked,
    told: &BTreeMap<i64, &str>,
    orders: &Orders,
    mut picks: Vec<String>,
) {
    match orders.picks_published().await {
        Ok(left) => picks.extend(left),
        Err(err) => {
            let why = format!("the PickTaskCreated on the broker could not be read: {err:#}");
            checked.anomalies.push(why);
            return;
        }
    }
    let mut announced: BTreeMap<i64, usize> = BTreeMap::new();
    for id in &picks {
        match id
            .strip_prefix("evt_pick_evt_order_")
            .and_then(|rest| rest.strip_suffix("_paid"))
            .and_then(|order| order.parse::<i64>().ok())
        {
            Some(order) => *announced.entry(order).or_default() += 1,
            None => checked
                .anomalies
                .push(format!("a PickTaskCreated on the broker of no order: {id}")),
        }
    }
    checked.picks_on_the_broker = picks.len();
    checked.picks_announced = announced.len();
    for (id, key) in told {
        if !announced.contains_key(id) {
            checked.anomalies.push(format!(
                "order {id} ({key}) has no PickTaskCreated on the broker"
            ));
        }
    }
    for id in announced.keys().filter(|id| !told.contains_key(id)) {
        checked.anomalies.push(format!(
            "order {id} has a PickTaskCreated on the broker, and no client was told it"
        ));
    }
}

/// A key's attempts, one a line.
fn excerpt(attempts: &[&Attempt]) -> String {
    attempts
        .iter()
        .map(|a| {
            format!(
                "  {:>8.3}s {} {:?} in {} ms: {}",
                a.sent_at, a.api, a.status, a.took_ms, a.answer
            )
        })
        .collect::<Vec<_>>()
        .join("\n")
}
