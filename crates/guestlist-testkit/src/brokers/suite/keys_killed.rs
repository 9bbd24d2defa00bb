//! Keys in parallel through crashes: two hundred keys of fifty messages each through a consumer
//! at concurrency 16 that is SIGKILLed three times mid-stream keep each key's order and one
//! effect per message.

use std::time::Duration;

use futures_util::future::join_all;

use crate::Fixture;
use crate::brokers::Broker;
use crate::brokers::child::{Running, parent};

use super::keys::Keys;

/// The story's ack wait (SQS's visibility timeout): a killed consumer's messages come back
/// after it where the broker waits for it (SQS, and NATS without the consumer's rewind).
const KILLED_ACK_WAIT: Duration = Duration::from_secs(5);

/// [`Broker::KEYS_STORY`] keys of [`Broker::KEYS_STORY`] messages each (200 × 50 but on moto's
/// SQS, a fifth of the messages on SQLite), published round after round, through a consumer at concurrency 16 SIGKILLed and
/// restarted at a quarter, half and three quarters of its effects. Every message has exactly
/// one effect, and each effect found its key's previous message's effect written and no later
/// one: each key's effects are in the order the broker holds them, across the crashes. On a
/// broker that commits offsets (Kafka), every record below the committed offsets has its effect
/// at each kill: a crash never committed past a record it had not done.
pub async fn keys_through_a_consumer_killed_three_times_keep_their_order<B: Broker, DB: Fixture>(
    name: &str,
) {
    let keys = Keys::<B, DB>::open(name, KILLED_ACK_WAIT).await;
    let (key_count, mut per_key) = B::KEYS_STORY;
    if !DB::CONCURRENT_WRITERS {
        // SQLite's lanes take turns at its one writer: a fifth of the messages keeps the
        // story within a minute there.
        per_key /= 5;
    }
    let all = (key_count * per_key) as i64;
    // A round publishes one message of every key at once and waits for the broker to confirm
    // them all: a key's next message goes only after its previous one is held, so the broker
    // holds each key's messages in the order of their places.
    let names: Vec<String> = (0..key_count).map(|key| format!("k{key}")).collect();
    for seq in 0..per_key {
        join_all(
            names
                .iter()
                .map(|key| keys.publish(key, seq, r#","slow_ms":2"#)),
        )
        .await;
    }
    let start = || Running(keys.rig.child(name, "keys_consumer", &[]));
    let mut consumer = start();
    let mut below_commits = Vec::new();
    for kill in 1..=3 {
        let at = all * kill / 4;
        keys.rig
            .until(
                Duration::from_secs(120),
                &format!("{at} of {all} events are handled"),
                || async { keys.count("1 = 1").await >= at },
            )
            .await;
        consumer.0.kill().expect("SIGKILL the consumer");
        consumer.0.wait().unwrap();
        let handled = keys.count("1 = 1").await;
        assert!(
            handled < all,
            "{}: kill {kill} landed after the last event",
            B::LABEL
        );
        if let Some(below) = keys.rig.broker.committed().await {
            let done = done_among(&keys, &below).await;
            assert_eq!(
                done,
                below.len(),
                "{}: at kill {kill}, {} records lie below the committed offsets, and only {done} \
                 of them have their effect",
                B::LABEL,
                below.len()
            );
            below_commits.push(below.len());
        }
        consumer = start();
    }
    keys.rig
        .until(
            Duration::from_secs(240),
            "every event is handled and nothing is outstanding",
            || async { keys.count("1 = 1").await >= all && keys.rig.broker.drained().await },
        )
        .await;
    drop(consumer);
    if !below_commits.is_empty() {
        eprintln!(
            "{}: records below the committed offsets at each kill, each with its effect: {below_commits:?}",
            B::LABEL
        );
    }
    assert_eq!(keys.count("1 = 1").await, all, "one effect per event");
    let distinct = format!("SELECT count(DISTINCT event) FROM {}", keys.table);
    assert_eq!(keys.rig.db.scalar(distinct).await, all, "each event once");
    let out_of_order = keys.count("prev <> seq - 1").await;
    let keys_out = format!(
        "SELECT count(DISTINCT k) FROM {} WHERE prev <> seq - 1",
        keys.table
    );
    assert_eq!(
        out_of_order,
        0,
        "{} on {}: {out_of_order} effects of {} keys found their key's previous message not \
         done, or a later one done, before them",
        B::LABEL,
        DB::LABEL,
        keys.rig.db.scalar(keys_out).await
    );
}

/// How many of the events whose payloads are `below` have their effect.
async fn done_among<B: Broker, DB: Fixture>(keys: &Keys<B, DB>, below: &[Vec<u8>]) -> usize {
    if below.is_empty() {
        return 0;
    }
    let ids: Vec<String> = below
        .iter()
        .map(|payload| {
            let event: serde_json::Value = serde_json::from_slice(payload).unwrap();
            // The story's ids are letters, digits and underscores.
            format!("'{}'", event["id"].as_str().unwrap())
        })
        .collect();
    let done = keys.count(&format!("event IN ({})", ids.join(", "))).await;
    usize::try_from(done).unwrap()
}

/// The consumer process the story starts and kills (a child test): concurrency 16, batches of
/// 100, keyed by the stories' header.
pub async fn keys_consumer<B: Broker, DB: Fixture>() {
    let Some((tag, url)) = parent("keys_consumer") else {
        return;
    };
    let keys = Keys::<B, DB>::attach(&tag, &url, KILLED_ACK_WAIT).await;
    // A kill lands on whatever is in hand: the same messages can ride several kills.
    let consumer = keys.consumer(16).await.batch_size(100).max_deliveries(50);
    consumer.run(std::future::pending()).await.unwrap();
}
