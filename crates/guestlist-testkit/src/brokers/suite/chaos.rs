//! Ten thousand events through two consumers, one killed again and again.

use std::hash::{BuildHasher, RandomState};
use std::time::Duration;

use crate::Fixture;

use crate::brokers::Broker;
use crate::brokers::child::parent;
use crate::brokers::rig::Rig;

/// The chaos consumers' ack wait: short, so that a killed consumer's messages come back soon.
const CHAOS_ACK_WAIT: Duration = Duration::from_secs(2);

/// Ten thousand publishes (a fifth of them repeats) through two consumer processes, one SIGKILLed
/// and restarted again and again: every distinct event has exactly one effect.
pub async fn ten_thousand_events_two_consumers_one_killed_again_and_again<
    B: Broker,
    DB: Fixture,
>(
    name: &str,
) {
    let events = B::CHAOS_EVENTS;
    let rig = Rig::<B, DB>::open(name, CHAOS_ACK_WAIT).await;
    // A fifth of the publishes repeat an earlier event: 8,000 distinct events of 10,000.
    let random = RandomState::new();
    let mut distinct = 0;
    let mut payloads = Vec::with_capacity(events);
    for n in 0..events {
        let repeat = n > 0 && random.hash_one(n) % 5 == 0;
        let id = if repeat {
            random.hash_one((n, "earlier")) as usize % distinct
        } else {
            distinct += 1;
            distinct - 1
        };
        // A millisecond of work each, so that the stream outlasts the kills: batches of 50
        // otherwise drain it in about a second.
        payloads.push(format!(r#"{{"id":"evt_{id}","slow_ms":1}}"#).into_bytes());
    }
    rig.broker.publish_stream(payloads).await;

    let start = || rig.child(name, "chaos_consumer", &[]);
    let steady = start();
    let mut doomed = start();
    let mut kills_mid_stream = 0;
    for round in 0..6 {
        let wait = 200 + random.hash_one(("kill", round)) % 600;
        tokio::time::sleep(Duration::from_millis(wait)).await;
        if (rig.effects().await.1 as usize) < distinct {
            kills_mid_stream += 1;
        }
        doomed.kill().expect("SIGKILL the doomed consumer");
        doomed.wait().unwrap();
        doomed = start();
    }
    settle(&rig, distinct).await;
    for mut child in [steady, doomed] {
        child.kill().unwrap();
        child.wait().unwrap();
    }
    eprintln!(
        "{}: {kills_mid_stream} of 6 kills landed while events flowed",
        B::LABEL
    );
    assert!(
        kills_mid_stream >= 3,
        "the kills landed while events were still flowing ({kills_mid_stream})"
    );
    let (all, unique) = rig.effects().await;
    assert_eq!(unique as usize, distinct, "none missing");
    assert_eq!(all, unique, "every distinct event has exactly one effect");
    assert_eq!(
        rig.broker.outstanding().await,
        0,
        "drained, nothing unacknowledged"
    );
}

/// Waits until every distinct event has its effect and nothing is outstanding on the broker,
/// failing only once a minute passes with neither figure moving: on a machine loaded by other
/// tests (moto, SQS's stand-in, serves every queue from one process) the drain is slow, not
/// stuck, and a stuck one names what it stuck at.
async fn settle<B: Broker, DB: Fixture>(rig: &Rig<B, DB>, distinct: usize) {
    const STILL: Duration = Duration::from_secs(60);
    let mut last = (0, u64::MAX);
    let mut moved = tokio::time::Instant::now();
    loop {
        let now = (
            rig.effects().await.1 as usize,
            rig.broker.outstanding().await,
        );
        if now.0 == distinct && now.1 == 0 {
            return;
        }
        if now != last {
            last = now;
            moved = tokio::time::Instant::now();
        }
        assert!(
            moved.elapsed() < STILL,
            "{}: stuck for {STILL:?} at {} of {distinct} events handled, {} outstanding",
            B::LABEL,
            now.0,
            now.1
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// The consumer process the chaos story starts and kills (a child test).
pub async fn chaos_consumer<B: Broker, DB: Fixture>() {
    let Some((tag, url)) = parent("chaos_consumer") else {
        return;
    };
    let rig = Rig::<B, DB>::attach(&tag, &url, CHAOS_ACK_WAIT).await;
    // Kills land on whatever is in hand: the same prefetched messages can ride several kills in
    // a row, which would look like a message that kills its consumer (poison) at 5 deliveries.
    let consumer = rig.consumer(50).await.max_deliveries(50);
    consumer.run(std::future::pending()).await.unwrap();
}
