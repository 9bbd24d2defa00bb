//! A key held back behind a message that went back keeps its order through a database outage:
//! the outage holds the key's later message in hand for longer than the hold's grace, while the
//! message it waits for cannot come back (nothing is fetched meanwhile).

use std::time::Duration;

use sqlx::postgres::PgPoolOptions;

use super::keys::Keys;
use crate::brokers::Broker;
use crate::fault_proxy::FaultProxy;
use crate::run_until_stopped;

/// How long the database stays away: longer than the first message's "not yet" (one second)
/// and the five seconds a hold outlives its message's return by.
const AWAY: Duration = Duration::from_secs(8);

/// A key's first message says "not yet" for a second; its second arrives while the database
/// (PostgreSQL, through a proxy the test cuts) is away, and is held in hand through an outage
/// longer than the key's hold would last by the clock. Once the database is back, the second
/// still waits behind the first: the first runs, then the second, each once.
pub async fn a_key_held_through_a_database_outage_keeps_its_order<B: Broker>(name: &str) {
    let keys = Keys::<B, sqlx::Postgres>::open(name, Duration::from_secs(30)).await;
    let (proxy, through_proxy) = FaultProxy::for_url(&keys.rig.db.url).await;
    let pool = PgPoolOptions::new()
        .max_connections(4)
        .acquire_timeout(Duration::from_secs(2))
        .connect(&through_proxy)
        .await
        .unwrap();
    let consumer = keys
        .consumer_on(pool, 4)
        .await
        .outage_backoff(Duration::from_millis(100), Duration::from_secs(1));
    let (stop, task) = run_until_stopped!(consumer);
    keys.publish("held", 0, r#","not_yet_until":1,"not_yet_ms":1000"#)
        .await;
    let deferrals = format!("SELECT count(*) FROM {}_deferrals", keys.rig.inbox.table());
    keys.rig
        .until(
            Duration::from_secs(30),
            "the key's first message is deferred",
            || async { keys.rig.db.scalar(deferrals.clone()).await == 1 },
        )
        .await;

    proxy.cut();
    keys.publish("held", 1, "").await;
    tokio::time::sleep(AWAY).await;
    assert_eq!(
        keys.count("1 = 1").await,
        0,
        "{}: nothing ran while the database was away",
        B::LABEL
    );
    proxy.mend();
    keys.rig
        .until(
            Duration::from_secs(60),
            "both messages are handled once the database is back",
            || async { keys.count("1 = 1").await == 2 },
        )
        .await;
    let handled = keys
        .rig
        .stop_drained(stop, task, Duration::from_secs(30))
        .await;
    assert_eq!(keys.count("1 = 1").await, 2, "one effect each");
    assert_eq!(
        keys.out_of_order("1 = 1").await,
        0,
        "{}: the key's second message ran before its first, which went back before the outage",
        B::LABEL
    );
    assert_eq!((handled.failed, handled.dead_lettered), (0, 0));
}
