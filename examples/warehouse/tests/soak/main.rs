//! The soak rig: the warehouse system as separate processes (payments, two warehouses that are
//! the shop's API and its consumers, two relays) on PostgreSQL and a broker, clients placing
//! orders and retrying as real clients do, and a nemesis injecting overlapping faults at
//! random moments from a printed seed. Once the faults stop and the system settles, a checker
//! holds the recorded history against every effect.
//!
//! In the suite: 90 s on NATS, RabbitMQ or Kafka by the day, the day's number as the seed. By
//! hand: `scripts/soak.sh --minutes 60 --broker kafka` (`GUESTLIST_SOAK_SECONDS`,
//! `GUESTLIST_SOAK_BROKER` = nats | rabbitmq | kafka | sqs, `GUESTLIST_SOAK_SEED` to replay a
//! run, `GUESTLIST_SOAK_REPORT` for the JSON report's path).

#![allow(unreachable_pub)] // a test crate has no public API

mod checker;
mod clients;
#[path = "../common/mod.rs"]
mod common;
mod links;
mod nemesis;
mod order;
mod parts;
mod picks;
mod purge;
mod resources;
mod waits;

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use common::{amqp_url, nats_url, sqs_url, until_the_broker_is_quiet};
use warehouse_example::broker::{Kind, Orders};

/// Clients placing orders at once.
const CLIENTS: usize = 8;
/// How long each client pauses between orders, in ms: a steady load the machine keeps up with,
/// so that what settles after a fault is the fault's doing. moto is the floor on SQS: at 100 % of
/// a core it carried about 6 orders a second end to end (a 15-minute run, seed 606, 5,297 of
/// 18,297 orders placed at 50 to 150 ms), so there the clients place about 4 a second.
fn pause_between_orders(kind: Kind) -> std::ops::Range<u64> {
    match kind {
        Kind::Sqs => 1_500..2_500,
        Kind::Nats | Kind::Rabbit | Kind::Kafka => 50..150,
    }
}

/// How long the system gets to settle once the faults stop.
const SETTLE: Duration = Duration::from_secs(120);

fn setting(name: &str) -> Option<String> {
    std::env::var(name).ok().filter(|v| !v.is_empty())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn soak_under_overlapping_faults_checked_by_the_history() {
    let seconds: u64 = setting("GUESTLIST_SOAK_SECONDS").map_or(90, |s| s.parse().unwrap());
    let days = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs()
        / 86_400;
    // Unless named, the broker changes with the day (SQS, on moto, is the slowest: by hand).
    let broker = setting("GUESTLIST_SOAK_BROKER")
        .unwrap_or_else(|| ["nats", "rabbitmq", "kafka"][(days % 3) as usize].to_owned());
    // Unless named, the day's number: a day's run replays, the next day's draws other faults.
    let seed: u64 = setting("GUESTLIST_SOAK_SEED").map_or(days, |s| s.parse().unwrap());
    eprintln!(
        "soak: {seconds} s on {broker}, seed {seed} (GUESTLIST_SOAK_SEED={seed} replays the faults)"
    );
    let pid = std::process::id();
    let broker_at = match broker.as_str() {
        "nats" => Orders::new(nats_url(), format!("SOAK_{pid}")),
        "rabbitmq" => Orders::new(amqp_url(), format!("soak_{pid}")),
        // A broker of the run's own, started behind the broker link's proxy.
        "kafka" => Orders::new("kafka://own", format!("soak_{pid}")),
        "sqs" => Orders::new(sqs_url(), format!("soak-{pid}")),
        other => panic!("GUESTLIST_SOAK_BROKER={other}: nats, rabbitmq, kafka or sqs"),
    };
    let listens = parts::Parts::addresses();
    let links = Arc::new(links::Links::start(&broker_at, &listens[&parts::Part::Payments]).await);
    // Through the broker link, which no fault holds yet or any more when it is asked.
    let orders = links.orders.clone();
    orders.remove().await.unwrap();
    orders.declare().await.unwrap();
    let pool = guestlist::sqlx::PgPool::connect(&links.postgres.url())
        .await
        .unwrap();
    let parts = Arc::new(
        parts::Parts::start(
            listens,
            &links.database_url,
            &links.orders,
            &links.payments_url(),
        )
        .await,
    );
    let through_the_link = guestlist::sqlx::PgPool::connect(&links.database_url)
        .await
        .unwrap();
    let purgers = purge::start(&through_the_link);
    let started = Instant::now();
    let until = started + Duration::from_secs(seconds);
    let history: clients::History = Arc::new(Mutex::new(Vec::new()));
    let placing = tokio::spawn(clients::run(
        parts.apis(),
        clients::Traffic {
            clients: CLIENTS,
            pause: pause_between_orders(orders.kind()),
        },
        seed,
        started,
        until,
        until + SETTLE,
        Arc::clone(&history),
    ));
    let stop_sampling = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let sampling = tokio::spawn(resources::sample(
        Arc::clone(&parts),
        started,
        Arc::clone(&stop_sampling),
        Duration::from_secs(5),
    ));
    let taking_picks = tokio::spawn(picks::take_while_running(
        broker_at.clone(),
        Arc::clone(&stop_sampling),
    ));
    let supervising = tokio::spawn({
        let (parts, stop) = (Arc::clone(&parts), Arc::clone(&stop_sampling));
        async move { parts.supervise(&stop).await }
    });
    let skews = orders.kind() != Kind::Kafka;
    let (nemesis_parts, nemesis_links) = (Arc::clone(&parts), Arc::clone(&links));
    let faults = nemesis::run(nemesis_parts, nemesis_links, seed, started, until, skews).await;
    let faults_ended = Instant::now();
    placing.await.unwrap();
    let answered = faults_ended.elapsed();
    // Settled: every order under way answered and picked, the outbox empty, the broker quiet.
    let deadline = faults_ended + SETTLE;
    // Every order placed has its pick task: a broker that counts only ready messages (RabbitMQ
    // over AMQP) looks quiet while a warehouse still holds deliveries unacknowledged.
    until_none(
        &pool,
        "SELECT count(*) FROM orders o \
         WHERE NOT EXISTS (SELECT 1 FROM pick_tasks p WHERE p.order_id = o.id)",
        deadline,
    )
    .await;
    let picked = faults_ended.elapsed();
    until_none(&pool, "SELECT count(*) FROM warehouse_outbox", deadline).await;
    let emptied = faults_ended.elapsed();
    // What stays on the broker past the settling is the checker's to name.
    let quiet = {
        let orders = orders.clone();
        async move { until_the_broker_is_quiet(&orders, Duration::from_secs(3), SETTLE).await }
    };
    let _ = tokio::spawn(quiet).await;
    let settled_in = faults_ended.elapsed();
    // Taken before the parts stop: what a part still waits on in the database, if anything.
    let busy = waits::busy_sessions(&pool, Duration::from_secs(5)).await;
    let phases = format!(
        "after the last fault: every order answered at {:.1} s, picked at {:.1} s, the outbox \
         empty at {:.1} s, the broker quiet for 3 s at {:.1} s",
        answered.as_secs_f64(),
        picked.as_secs_f64(),
        emptied.as_secs_f64(),
        settled_in.as_secs_f64()
    );
    stop_sampling.store(true, std::sync::atomic::Ordering::Relaxed);
    let readings = sampling.await.unwrap();
    let picks_taken = taking_picks.await.unwrap();
    supervising.await.unwrap();
    let exits = parts.exits();
    let unstopped = parts.stop().await;

    let history = history.lock().unwrap().clone();
    let mut checked = checker::check(&history, &pool, &orders, picks_taken).await;
    checked.anomalies.extend(resources::growth(&readings));
    checked.anomalies.extend(purge::behind(&pool).await);
    checked.anomalies.extend(unstopped);
    for purger in purgers {
        purger.shutdown().await;
    }
    let curves = resources::curves(&readings);
    eprintln!(
        "soak report: seed {seed}, {broker}, {seconds} s, {} faults, {} keys ({} succeeded) in {} \
         attempts, {} orders, {} pick tasks, {} reservations, {} charges, settled {:.1} s after the last fault, \
         {} anomalies",
        faults.len(),
        checked.keys,
        checked.succeeded,
        checked.attempts,
        checked.orders,
        checked.pick_tasks,
        checked.reservations,
        checked.charges,
        settled_in.as_secs_f64(),
        checked.anomalies.len()
    );
    eprintln!("  {phases}");
    eprintln!(
        "  on the broker: {} PickTaskCreated for {} orders",
        checked.picks_on_the_broker, checked.picks_announced
    );
    eprintln!(
        "  each customer's orders at the warehouse: {} customers, {} orders, {} out of the order \
         they were placed in ({})",
        checked.order.customers,
        checked.order.orders,
        checked.order.out_of_order.len(),
        if checked.order_kept_by_the_broker {
            "the broker keeps a key's order between the two warehouses: each is an anomaly"
        } else {
            "counted only: the two warehouses share one consumer or queue, which keeps no order \
             between them"
        }
    );
    for line in &curves {
        eprintln!("  {line}");
    }
    for (at, what) in &exits {
        eprintln!("  exit at {at:.2}s: {what}");
    }
    for session in &busy {
        eprintln!("  busy in the database once settled: {session}");
    }
    if let Some(path) = setting("GUESTLIST_SOAK_REPORT") {
        let report = serde_json::json!({
            "seed": seed,
            "broker": broker,
            "seconds": seconds,
            "faults": faults,
            "checked": checked,
            "settled_after_last_fault_s": settled_in.as_secs_f64(),
            "settling": phases,
            "resources": readings,
            "exits": exits,
        });
        std::fs::write(path, serde_json::to_vec_pretty(&report).unwrap()).unwrap();
    }
    for repeat in &checked.order.repeated {
        eprintln!("handled twice: {repeat}");
    }
    for anomaly in &checked.anomalies {
        eprintln!("ANOMALY {anomaly}");
    }
    assert!(
        checked.anomalies.is_empty(),
        "{} anomalies (above); replay with GUESTLIST_SOAK_SEED={seed}",
        checked.anomalies.len()
    );
    assert!(checked.succeeded > 0, "no order was placed at all");
    orders.remove().await.unwrap();
}

/// How long a backlog still shrinking may keep the settling going past its deadline: a slower
/// machine drains what the faults left behind more slowly, and that is not an anomaly, but a
/// backlog that stops shrinking is.
const SHRINKING_PAST_THE_DEADLINE: Duration = Duration::from_secs(600);

/// How long a backlog may stay as it is before the settling past the deadline gives up on it.
const STALLED: Duration = Duration::from_secs(30);

/// Waits until `count` (a `SELECT count(*)`) finds none, or `deadline` passes, or, if what it
/// finds still shrinks then, until it stalls for [`STALLED`] or
/// [`SHRINKING_PAST_THE_DEADLINE`] passes too.
async fn until_none(pool: &guestlist::sqlx::PgPool, count: &'static str, deadline: Instant) {
    let mut fewest = i64::MAX;
    let mut shrank_at = Instant::now();
    loop {
        let found: i64 = guestlist::sqlx::query_scalar(count)
            .fetch_one(pool)
            .await
            .unwrap();
        if found < fewest {
            fewest = found;
            shrank_at = Instant::now();
        }
        let now = Instant::now();
        let past = now > deadline;
        if found == 0
            || (past && shrank_at.elapsed() > STALLED)
            || now > deadline + SHRINKING_PAST_THE_DEADLINE
        {
            if past && found > 0 {
                eprintln!("soak: {found} left for `{count}` past the settling's deadline");
            } else if past {
                eprintln!(
                    "soak: `{count}` emptied {:.0} s past the settling's deadline (still shrinking)",
                    (now - deadline).as_secs_f64()
                );
            }
            return;
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}
