//! Ten thousand events through two consumers, one killed again and again.

use std::hash::{BuildHasher, RandomState};
use std::time::Duration;

use guestlist_core::{HandlerName, MessageId};

use crate::Fixture;

use crate::brokers::Broker;
use crate::brokers::child::{Running, parent};
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
    // The publisher runs beside the consumers and the kills, in this task: a publish the
    // broker refused fails the story with the publisher's own error, never ends the stream
    // unseen.
    let publishing = rig.broker.publish_stream(payloads);
    let chaos = async {
        let start = || Running(rig.child(name, "chaos_consumer", &[]));
        let steady = start();
        let mut doomed = start();
        let mut kills_mid_stream = 0;
        for round in 0..6 {
            let wait = 200 + random.hash_one(("kill", round)) % 600;
            tokio::time::sleep(Duration::from_millis(wait)).await;
            if (rig.effects().await.1 as usize) < distinct {
                kills_mid_stream += 1;
            }
            doomed.0.kill().expect("SIGKILL the doomed consumer");
            doomed.0.wait().unwrap();
            doomed = start();
        }
        (steady, doomed, kills_mid_stream)
    };
    let (confirmed, (steady, doomed, kills_mid_stream)) = tokio::join!(publishing, chaos);
    // Every payload is on the broker before the story waits for effects: from here on, an
    // event without its effect is the product's loss (or the broker's), not the story's.
    assert_eq!(
        confirmed,
        events,
        "{}: the broker confirmed {confirmed} of {events} publishes",
        B::LABEL
    );
    settle(&rig, Published { events, distinct }).await;
    drop((steady, doomed));
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

/// What the story published: publishes the broker confirmed, and the distinct events among them
/// (`evt_0` to `evt_{distinct - 1}`).
#[derive(Debug, Clone, Copy)]
struct Published {
    events: usize,
    distinct: usize,
}

/// Waits until every distinct event has its effect and nothing is outstanding on the broker,
/// failing only once a minute passes with neither figure moving: on a machine loaded by other
/// tests (moto, SQS's stand-in, serves every queue from one process) the drain is slow, not
/// stuck. A stuck one says what it stuck at, what was published, and which events have no
/// effect, each with whether the inbox holds it (claimed without its effect: the product's
/// loss) or not (never handled: the message never reached a handler).
async fn settle<B: Broker, DB: Fixture>(rig: &Rig<B, DB>, published: Published) {
    const STILL: Duration = Duration::from_secs(60);
    let mut last = (0, u64::MAX);
    let mut moved = tokio::time::Instant::now();
    loop {
        let now = (
            rig.effects().await.1 as usize,
            rig.broker.outstanding().await,
        );
        if now.0 == published.distinct && now.1 == 0 {
            return;
        }
        if now != last {
            last = now;
            moved = tokio::time::Instant::now();
        }
        if moved.elapsed() >= STILL {
            let missing = missing(rig, published.distinct).await;
            panic!(
                "{}: stuck for {STILL:?} at {} of {} events handled, {} outstanding; the broker \
                 confirmed all {} publishes of those {} distinct events; without an effect: {}",
                B::LABEL,
                now.0,
                published.distinct,
                now.1,
                published.events,
                published.distinct,
                missing.join(", ")
            );
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// The first ten events of `evt_0` to `evt_{distinct - 1}` without an effect, each with whether
/// the inbox holds it.
async fn missing<B: Broker, DB: Fixture>(rig: &Rig<B, DB>, distinct: usize) -> Vec<String> {
    let handler = HandlerName::new("warehouse").unwrap();
    let mut missing = Vec::new();
    for n in 0..distinct {
        let event = format!("evt_{n}");
        let effects = rig
            .db
            .scalar(format!(
                "SELECT count(*) FROM {} WHERE event = '{event}'",
                rig.effects
            ))
            .await;
        if effects > 0 {
            continue;
        }
        let held = rig
            .inbox
            .holds(&rig.db.pool, &handler, &MessageId::new(&event).unwrap())
            .await;
        missing.push(match held {
            Ok(true) => format!("{event} (in the inbox)"),
            Ok(false) => format!("{event} (not in the inbox)"),
            Err(err) => format!("{event} (the inbox: {err})"),
        });
        if missing.len() == 10 {
            missing.push("…".to_owned());
            break;
        }
    }
    missing
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
