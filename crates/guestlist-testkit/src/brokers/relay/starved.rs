//! A relay starved of CPU between its batch's last check and the broker (its thread held, as a
//! busy machine or a SIGSTOP would hold it): another relay takes the lease meanwhile and
//! publishes the same messages, and the starved one, woken, sends nothing of its batch.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use guestlist_sqlx::Relay;
use tracing::field::{Field, Visit};
use tracing::instrument::WithSubscriber;
use tracing::span::{Attributes, Id, Record};
use tracing::{Event, Metadata, Subscriber};

use super::line::Line;
use crate::Fixture;
use crate::brokers::Broker;

/// Relay A's tracing subscriber: it holds A's thread when A makes its first message's send span
/// (the batch read, checked and ready; the broker not yet called) until `wake` is set, and
/// counts the send spans that end as "lease lost".
struct Starving {
    starved: Arc<AtomicBool>,
    wake: Arc<AtomicBool>,
    lease_lost: Arc<AtomicU64>,
    next_id: AtomicU64,
}

impl Subscriber for Starving {
    fn enabled(&self, _: &Metadata<'_>) -> bool {
        true
    }

    fn new_span(&self, span: &Attributes<'_>) -> Id {
        if span.metadata().name() == "guestlist.relay.send"
            && !self.starved.swap(true, Ordering::SeqCst)
        {
            let since = Instant::now();
            while !self.wake.load(Ordering::SeqCst) && since.elapsed() < Duration::from_secs(60) {
                std::thread::sleep(Duration::from_millis(10));
            }
        }
        Id::from_u64(self.next_id.fetch_add(1, Ordering::SeqCst))
    }

    fn record(&self, _: &Id, values: &Record<'_>) {
        values.record(&mut LeaseLost(&self.lease_lost));
    }

    fn record_follows_from(&self, _: &Id, _: &Id) {}

    fn event(&self, _: &Event<'_>) {}

    fn enter(&self, _: &Id) {}

    fn exit(&self, _: &Id) {}
}

/// Counts a `guestlist.outcome` of "lease lost".
struct LeaseLost<'a>(&'a AtomicU64);

impl Visit for LeaseLost<'_> {
    fn record_str(&mut self, field: &Field, value: &str) {
        if field.name() == "guestlist.outcome" && value == "lease lost" {
            self.0.fetch_add(1, Ordering::SeqCst);
        }
    }

    fn record_debug(&mut self, _: &Field, _: &dyn std::fmt::Debug) {}
}

/// Relay A reads a batch and makes it ready, then its thread is held (on a runtime and a pool of
/// its own, so that nothing else waits on it) until its lease has run out, relay B has taken the
/// lease over and B has published and stamped every message. Woken, A finds its lease no
/// longer usable on its own clock and sends nothing of its batch: the broker has each message
/// once. (A relay that checked its lease only before making the batch ready would send the whole
/// batch a second time here.)
pub async fn a_relay_starved_before_the_broker_sends_nothing_another_took<
    B: Broker,
    DB: Fixture,
>(
    name: &str,
) {
    const EVENTS: i64 = 20;
    const LEASE: Duration = Duration::from_secs(1);
    let line = Line::<B, DB>::open(name).await;
    line.single_shard().await;
    for n in 0..EVENTS {
        line.enqueue(&format!("evt_{n}"), &format!("order-{}", n % 4), true)
            .await;
    }
    let starved = Arc::new(AtomicBool::new(false));
    let wake = Arc::new(AtomicBool::new(false));
    let lease_lost = Arc::new(AtomicU64::new(0));
    let starving = Starving {
        starved: starved.clone(),
        wake: wake.clone(),
        lease_lost: lease_lost.clone(),
        next_id: AtomicU64::new(1),
    };
    let (outbox, url) = (line.outbox.clone(), line.rig.db.url.clone());
    let publisher = line.rig.broker.publisher().await;
    let a = std::thread::spawn(move || {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .expect("relay A's runtime");
        runtime.block_on(async move {
            let pool = DB::connect(&url, 2).await.expect("relay A's pool");
            let relay = Relay::new(outbox, pool, publisher)
                .lease(LEASE)
                .poll(Duration::from_millis(20))
                .batch(50)
                .holder("relay-a");
            relay.drain().with_subscriber(starving).await
        })
    });
    line.rig
        .until(
            Duration::from_secs(30),
            "relay A has its batch ready",
            || async { starved.load(Ordering::SeqCst) },
        )
        .await;

    let b = line
        .relay(line.rig.broker.publisher().await, LEASE)
        .holder("relay-b");
    let since = Instant::now();
    let by_b = loop {
        match b.drain().await {
            Ok(Some(relayed)) => break relayed,
            Ok(None) => {
                assert!(
                    since.elapsed() < Duration::from_secs(30),
                    "{}: relay A's lease never ran out",
                    B::LABEL
                );
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
            Err(err) => panic!("{}: relay B: {err}", B::LABEL),
        }
    };
    assert_eq!(
        by_b.published as i64,
        EVENTS,
        "{}: relay B took the lease over and published everything ({by_b:?})",
        B::LABEL
    );
    assert_eq!(line.pending().await, 0, "{}", B::LABEL);

    wake.store(true, Ordering::SeqCst);
    let by_a = tokio::task::spawn_blocking(move || a.join())
        .await
        .unwrap()
        .expect("relay A's thread");
    match by_a {
        Ok(Some(relayed)) => assert_eq!(
            relayed.published,
            0,
            "{}: relay A sent nothing: {relayed:?}",
            B::LABEL
        ),
        Ok(None) => {}
        Err(err) => panic!("{}: relay A: {err}", B::LABEL),
    }
    let received = line.rig.broker.received().await;
    assert_eq!(received.len() as i64, EVENTS, "{}: each once", B::LABEL);
    assert!(
        lease_lost.load(Ordering::SeqCst) > 0,
        "{}: relay A's send spans end as \"lease lost\"",
        B::LABEL
    );
}
