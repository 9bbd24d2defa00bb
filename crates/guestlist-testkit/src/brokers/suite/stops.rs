//! Stopping: a shutdown, a SIGTERM or a SIGKILL mid-batch loses nothing, and a long handler
//! keeps its delivery alive.

use std::process::Command;
use std::sync::Arc;
use std::time::Duration;

use crate::Fixture;
use tokio::sync::Notify;

use crate::brokers::Broker;
use crate::brokers::child::parent;
use crate::brokers::graceful::stopped_within_grace;
use crate::brokers::rig::{Rig, order_paid};
use crate::run_until_stopped;

/// A consumer asked to shut down mid-batch finishes or gives back what it holds: nothing is lost.
pub async fn shutdown_mid_batch_loses_nothing<B: Broker, DB: Fixture>(name: &str) {
    let rig = Rig::<B, DB>::open(name, Duration::from_secs(30)).await;
    for n in 0..40 {
        rig.broker
            .publish(format!(r#"{{"id":"evt_{n}","slow_ms":20}}"#).as_bytes())
            .await;
    }
    let started = Arc::new(Notify::new());
    let (stop, task) = run_until_stopped!(rig.consumer_signalling(10, started.clone()).await);
    started.notified().await; // a batch is in hand
    stop.send(()).unwrap();
    let first = task.await.unwrap().unwrap();
    assert!(first.fresh > 0, "the batch in hand was finished: {first:?}");
    assert!(first.delivered < 40, "and no more was fetched: {first:?}");
    let (done, _) = rig.effects().await;
    assert_eq!(done as u64, first.fresh, "what was handled was committed");

    let (stop, task) = run_until_stopped!(rig.consumer(10).await);
    rig.until(Duration::from_secs(30), "the rest is handled", || async {
        rig.broker.drained().await && rig.effects().await.1 == 40
    })
    .await;
    stop.send(()).unwrap();
    task.await.unwrap().unwrap();
    assert_eq!(rig.effects().await, (40, 40), "nothing lost, nothing twice");
    let carried = rig
        .db
        .scalar(format!(
            "SELECT count(*) FROM {} WHERE carried = 'warehouse:' || event || '/charge'",
            rig.effects
        ))
        .await;
    assert_eq!(
        carried, 40,
        "batched handlers carry their own message's key too"
    );
}

/// A handler longer than the broker's ack wait keeps its delivery alive: it runs once.
pub async fn a_long_handler_keeps_its_delivery_alive<B: Broker, DB: Fixture>(name: &str) {
    let ack_wait = Duration::from_secs(1);
    let rig = Rig::<B, DB>::open(name, ack_wait).await;
    rig.broker
        .publish(br#"{"id":"evt_slow","slow_ms":2500}"#)
        .await;
    let (stop, task) = run_until_stopped!(rig.consumer(1).await);
    rig.until(
        Duration::from_secs(20),
        "the slow event is handled",
        || async { rig.effects().await.0 == 1 },
    )
    .await;
    tokio::time::sleep(ack_wait * 2).await; // a redelivery would show by now
    stop.send(()).unwrap();
    let handled = task.await.unwrap().unwrap();
    assert_eq!(
        handled.delivered, 1,
        "the broker never redelivered it: {handled:?}"
    );
    assert_eq!(rig.effects().await, (1, 1));
    // RabbitMQ's own figures (rabbitmqctl) catch up with the acknowledgement a moment later.
    rig.until(Duration::from_secs(10), "the queue is drained", || {
        rig.broker.drained()
    })
    .await;
}

/// A consumer process sent SIGTERM mid-batch finishes the batch and loses nothing.
pub async fn sigterm_mid_batch_finishes_the_batch_and_loses_nothing<B: Broker, DB: Fixture>(
    name: &str,
) {
    let rig = Rig::<B, DB>::open(name, Duration::from_secs(30)).await;
    for n in 0..60 {
        rig.broker
            .publish(format!(r#"{{"id":"evt_{n}","slow_ms":25}}"#).as_bytes())
            .await;
    }
    let mut child = rig.child(name, "term_consumer", &[]);
    rig.until(
        Duration::from_secs(30),
        "the consumer has committed a batch",
        || async { rig.effects().await.0 > 0 },
    )
    .await;
    let pid = child.id().to_string();
    let signalled = Command::new("kill").args(["-TERM", &pid]).status().unwrap();
    assert!(signalled.success());
    let status = tokio::task::spawn_blocking(move || child.wait().unwrap())
        .await
        .unwrap();
    assert!(status.success(), "SIGTERM is a clean stop: {status}");
    let (done, _) = rig.effects().await;
    assert!(done < 60, "it stopped before the end ({done} handled)");

    let (stop, task) = run_until_stopped!(rig.consumer(10).await);
    rig.until(Duration::from_secs(60), "the rest is handled", || async {
        rig.effects().await.1 == 60 && rig.broker.drained().await
    })
    .await;
    stop.send(()).unwrap();
    task.await.unwrap().unwrap();
    assert_eq!(rig.effects().await, (60, 60), "nothing lost, nothing twice");
}

/// The consumer process the SIGTERM story stops (a child test).
pub async fn term_consumer<B: Broker, DB: Fixture>() {
    let Some((tag, url)) = parent("term_consumer") else {
        return;
    };
    let rig = Rig::<B, DB>::attach(&tag, &url, Duration::from_secs(30)).await;
    let consumer = rig.consumer(10).await;
    consumer
        .run(guestlist_consumer::shutdown_signal())
        .await
        .unwrap();
}

/// The held-acks child's ack wait: short, so that JetStream redelivers the killed consumer's batch soon.
const HELD_ACK_WAIT: Duration = Duration::from_secs(2);

/// A consumer SIGKILLed between its commit and its acknowledgements: the batch is redelivered, and
/// every message in it is a duplicate.
pub async fn sigkill_between_commit_and_acks_redelivers_a_batch_of_duplicates<
    B: Broker,
    DB: Fixture,
>(
    name: &str,
) {
    const EVENTS: usize = 40;
    let rig = Rig::<B, DB>::open(name, HELD_ACK_WAIT).await;
    for n in 0..EVENTS {
        rig.broker.publish(&order_paid(&format!("evt_{n}"))).await;
    }
    let mut child = rig.child(name, "held_acks_consumer", &[]);
    // Its batch acknowledgements never leave: once a batch of several has committed, it waits
    // there for good (a first batch of one may come before, acknowledged as usual).
    rig.until(
        Duration::from_secs(30),
        "the consumer committed a batch",
        || async { rig.effects().await.0 > 1 },
    )
    .await;
    tokio::time::sleep(Duration::from_millis(300)).await;
    let (committed, _) = rig.effects().await;
    // Committed, not acknowledged: killed right there.
    child.kill().expect("SIGKILL the consumer");
    child.wait().unwrap();
    assert_eq!(
        rig.effects().await,
        (committed, committed),
        "the batch committed, once"
    );

    let (stop, task) = run_until_stopped!(rig.consumer(100).await);
    rig.until(
        Duration::from_secs(60),
        "every event is handled and acknowledged, the redelivered batch too",
        || async {
            rig.effects().await.1 == EVENTS as i64
                && rig.broker.drained().await
                && rig.broker.outstanding().await == 0
        },
    )
    .await;
    stop.send(()).unwrap();
    let handled = task.await.unwrap().unwrap();
    assert_eq!(
        rig.effects().await,
        (EVENTS as i64, EVENTS as i64),
        "no second effect for the redelivered batch"
    );
    // At least the held batch comes back as duplicates. More may: on a loaded machine a message
    // can outlast the short ack wait while the new consumer handles it and come once more (a
    // CI run counted 41 duplicates of 40 committed), each again without an effect.
    assert!(
        handled.duplicates >= 2,
        "the redelivered batch is acknowledged as duplicates: {handled:?}"
    );
    assert_eq!(
        handled.fresh,
        EVENTS as u64 - committed as u64,
        "only what never committed runs: {handled:?}"
    );
    assert_eq!(
        rig.broker.outstanding().await,
        0,
        "nothing left unacknowledged"
    );
}

/// The consumer process the commit-then-kill story stops before its acknowledgements (a child test).
pub async fn held_acks_consumer<B: Broker, DB: Fixture>() {
    let Some((tag, url)) = parent("held_acks_consumer") else {
        return;
    };
    let rig = Rig::<B, DB>::attach(&tag, &url, HELD_ACK_WAIT).await;
    let source = crate::brokers::held_acks::HeldAcks(rig.broker.source().await);
    rig.consumer_of(source, 100)
        .run(std::future::pending())
        .await
        .unwrap();
}

/// A consumer whose pool goes through a [`FaultProxy`](crate::fault_proxy::FaultProxy) is told
/// to stop while every byte between it and the database is held, a batch in hand: its run
/// returns within its shutdown grace rather than wait on a claim that will never be answered
/// (an orchestrator would SIGKILL it at its own deadline). What it held comes back from the
/// broker to the next consumer: fifteen events, fifteen effects.
pub async fn a_consumer_told_to_stop_while_its_database_stalls_stops_within_its_grace<
    B: Broker,
    DB: Fixture,
>(
    name: &str,
) {
    const GRACE: Duration = Duration::from_secs(1);
    let rig = Rig::<B, DB>::open(name, Duration::from_secs(2)).await;
    let (proxy, url) = crate::fault_proxy::FaultProxy::for_url(&rig.db.url).await;
    let pool = DB::connect(&url, 4)
        .await
        .expect("a pool through the proxy");
    let consumer = rig
        .consumer_on(pool, rig.inbox.clone())
        .await
        .shutdown_grace(GRACE);
    let (stop, task) = run_until_stopped!(consumer);
    for n in 0..10 {
        rig.broker.publish(&order_paid(&format!("evt_{n}"))).await;
    }
    // Acknowledged too, not only committed: the commit's answer comes back through the proxy,
    // and a stall that caught it would leave the batch uncounted.
    rig.until(
        Duration::from_secs(30),
        "the first ten are handled and acknowledged",
        || async { rig.effects().await.1 == 10 && rig.broker.drained().await },
    )
    .await;

    proxy.stall();
    for n in 10..15 {
        rig.broker.publish(&order_paid(&format!("evt_{n}"))).await;
    }
    // The consumer fetches them and sends their claim into the stall.
    tokio::time::sleep(Duration::from_millis(500)).await;
    let first = stopped_within_grace(B::LABEL, "the consumer", stop, task, GRACE)
        .await
        .unwrap();
    assert_eq!(first.fresh, 10, "{}: {first:?}", B::LABEL);

    let (stop, task) = run_until_stopped!(rig.consumer(10).await);
    rig.until(
        Duration::from_secs(90),
        "the next consumer handles what the stalled one held",
        || async { rig.effects().await.1 == 15 && rig.broker.drained().await },
    )
    .await;
    stop.send(()).unwrap();
    task.await.unwrap().unwrap();
    proxy.release();
    assert_eq!(
        rig.effects().await,
        (15, 15),
        "{}: nothing lost, nothing twice",
        B::LABEL
    );
}
