//! Two relays, one killed again and again, keep each key's order.

use std::hash::{BuildHasher, RandomState};
use std::sync::Arc;
use std::time::Duration;

use crate::Fixture;

use super::line::*;
use crate::brokers::Broker;
use crate::brokers::child::parent;

/// Two relays on one table, the lease's holder SIGKILLed again and again while four writers
/// commit messages on a few keys: every message reaches the broker, each key's in commit order.
pub async fn two_relays_one_killed_again_and_again_keep_each_keys_order<B: Broker, DB: Fixture>(
    name: &str,
) {
    const MESSAGES: usize = 2_000;
    const WRITERS: usize = 4;
    const KEYS: usize = 10;
    let line = Arc::new(Line::<B, DB>::open(name).await);
    line.single_shard().await;
    let lease = [(CHILD_LEASE_MS, "600".to_owned())];
    let mut relays = [
        line.child(name, "chaos_relay", &lease),
        line.child(name, "chaos_relay", &lease),
    ];

    let writers: Vec<_> = (0..WRITERS)
        .map(|writer| {
            let line = Arc::clone(&line);
            tokio::spawn(async move {
                for n in (writer..MESSAGES).step_by(WRITERS) {
                    line.enqueue(&format!("evt_{n}"), &format!("order-{}", n % KEYS), true)
                        .await;
                    // Paced, so that the stream outlasts the kills (about 6 s).
                    tokio::time::sleep(Duration::from_millis(12)).await;
                }
            })
        })
        .collect();
    let random = RandomState::new();
    let (mut kills, mut kills_mid_stream) = (0, 0);
    for round in 0..12 {
        if kills == 6 {
            break;
        }
        // Past the last kill's lease, so that the other relay has taken over.
        let wait = 700 + random.hash_one(("kill", round)) % 500;
        tokio::time::sleep(Duration::from_millis(wait)).await;
        // The relay holding the lease is the one killed: its name carries its process id.
        let holder = line.lease().await.holder;
        let Some(doomed) = relays
            .iter()
            .position(|relay| holder == Some(relay_name(relay.id())))
        else {
            continue;
        };
        kills += 1;
        if writers.iter().any(|w| !w.is_finished()) || line.pending().await > 0 {
            kills_mid_stream += 1;
        }
        relays[doomed]
            .kill()
            .expect("SIGKILL the relay holding the lease");
        relays[doomed].wait().unwrap();
        relays[doomed] = line.child(name, "chaos_relay", &lease);
    }
    for writer in writers {
        writer.await.unwrap();
    }
    line.rig
        .until(
            Duration::from_secs(120),
            "every message is published",
            || async { line.pending().await == 0 },
        )
        .await;
    let taken = line.lease().await.token;
    for mut relay in relays {
        relay.kill().unwrap();
        relay.wait().unwrap();
    }
    assert!(
        kills_mid_stream >= 3,
        "kills of the lease's holder landed while messages were flowing ({kills_mid_stream})"
    );
    assert!(
        taken > kills_mid_stream,
        "each kill was followed by a take-over (lease token {taken})"
    );

    let received = line.assert_received_in_key_order(MESSAGES, KEYS).await;
    eprintln!(
        "{}: {} messages on the broker for {MESSAGES} ({} repeats), {kills_mid_stream} kills mid-stream",
        B::LABEL,
        received,
        received - MESSAGES
    );
}

/// A relay the chaos test runs, two at a time, and kills.
pub async fn chaos_relay<B: Broker, DB: Fixture>() {
    let Some((tag, url)) = parent("chaos_relay") else {
        return;
    };
    let line = Line::<B, DB>::attach(&tag, &url).await;
    let publisher = line.rig.broker.publisher().await;
    let relay = line
        .relay(publisher, Duration::from_millis(env_ms(CHILD_LEASE_MS)))
        .holder(relay_name(std::process::id()));
    relay.run(std::future::pending()).await.unwrap();
}
