//! The relay's stories of one relay: a rolled-back write publishes nothing, a crash between
//! confirm and stamp costs no second effect, a relay that lost its lease stamps nothing, a commit
//! wakes an idle relay, a message no queue takes stays pending, and each key keeps its order.

use std::collections::BTreeMap;
use std::time::Duration;

use crate::Fixture;
use guestlist_core::{MessageId, Topic};
use guestlist_sqlx::Outgoing;

use super::held::*;
use super::line::*;
use crate::brokers::Broker;
use crate::brokers::rig::order_paid;
use crate::run_until_stopped;

/// A rolled-back write publishes nothing; a committed one is published once and has one effect.
pub async fn a_rolled_back_write_publishes_nothing_a_committed_one_once<B: Broker, DB: Fixture>(
    name: &str,
) {
    let line = Line::<B, DB>::open(name).await;
    line.enqueue("evt_1", "order-42", false).await;
    line.enqueue("evt_2", "order-42", true).await;
    let relay = line.relay(line.rig.broker.publisher().await, Duration::from_secs(5));
    let relayed = relay.drain().await.unwrap().expect("the lease was free");
    assert_eq!(relayed.published, 1, "only the committed message");
    assert_eq!(line.pending().await, 0, "stamped once confirmed");

    let handled = line.consume(1).await;
    assert_eq!(handled.delivered, 1, "one message reached the broker");
    assert_eq!(line.rig.effects().await, (1, 1), "one effect");
    let effect = line
        .rig
        .db
        .scalar(format!(
            "SELECT count(*) FROM {} WHERE event = 'evt_2'",
            line.rig.effects
        ))
        .await;
    assert_eq!(effect, 1, "the committed event's");
    let again = relay.drain().await.unwrap().unwrap();
    assert_eq!(
        again.published, 0,
        "a stamped message is not published again"
    );
}

/// A relay SIGKILLed after the broker confirmed a batch and before it stamped it: the next relay
/// publishes the batch again, and the broker or the inbox drops the repeat (one effect each).
pub async fn sigkill_between_confirm_and_stamp_publishes_again_without_a_second_effect<
    B: Broker,
    DB: Fixture,
>(
    name: &str,
) {
    const EVENTS: i64 = 20;
    let line = Line::<B, DB>::open(name).await;
    let (mut child, _marker) = line
        .held_batch(name, EVENTS, false, Duration::from_secs(600))
        .await;
    child
        .kill()
        .expect("SIGKILL the relay between confirm and stamp");
    child.wait().unwrap();
    assert_eq!(
        line.pending().await as i64,
        EVENTS,
        "confirmed by the broker, never stamped"
    );

    // The lease of the killed relay runs out; then a new relay publishes them all again.
    line.until_lease_ran_out().await;
    let relay = line.relay(line.rig.broker.publisher().await, Duration::from_secs(5));
    let relayed = relay.drain().await.unwrap().expect("the lease expired");
    assert_eq!(relayed.published as i64, EVENTS);
    let dropped_by_broker = if B::DEDUPLICATES { EVENTS } else { 0 };
    assert_eq!(
        relayed.duplicates as i64,
        if B::REPORTS_DUPLICATES { EVENTS } else { 0 },
        "{}: the broker's own deduplication",
        B::LABEL
    );
    assert_eq!(line.pending().await, 0);

    // What the broker holds, where it can be counted without consuming it (not RabbitMQ): a
    // broker may hold more copies than were confirmed (tansu does not always drop an
    // idempotent producer's retried batch), never fewer.
    let stored = line.rig.broker.stored().await;
    let expected = (2 * EVENTS - dropped_by_broker) as usize;
    assert!(
        stored.unwrap_or(expected) >= expected,
        "{}: every confirmed publish is on the broker ({stored:?})",
        B::LABEL
    );
    let handled = line.consume(EVENTS).await;
    assert_eq!(
        handled.delivered as usize,
        stored.unwrap_or(expected),
        "what got past the broker reached the consumer"
    );
    assert_eq!(
        line.rig.effects().await,
        (EVENTS, EVENTS),
        "one effect each: the inbox dropped what the broker let through"
    );
}

/// A relay paused (SIGSTOP) past its lease while another takes over stamps nothing once resumed.
pub async fn a_relay_that_lost_its_lease_stamps_nothing<B: Broker, DB: Fixture>(name: &str) {
    const EVENTS: i64 = 5;
    let line = Line::<B, DB>::open(name).await;
    let (mut child, _marker) = line
        .held_batch(name, EVENTS, true, Duration::from_millis(300))
        .await;
    // Paused (by itself, so exactly there) between the broker's confirmation and its stamp, past
    // the end of its lease.
    line.until_lease_ran_out().await;
    // The successor keeps the rows it publishes, so that the paused relay's stamp (it deletes
    // the rows it stamps) would show.
    let relay = line
        .relay(line.rig.broker.publisher().await, Duration::from_secs(5))
        .keep_published(true);
    let relayed = relay
        .drain()
        .await
        .unwrap()
        .expect("the paused relay's lease expired");
    assert_eq!(
        relayed.published as i64, EVENTS,
        "the successor published them"
    );
    // Mark the successor's stamps, so that a stamp from the paused relay would show.
    let table = line.outbox.table();
    let sentinel = "'2000-01-01 00:00:00'";
    line.rig
        .db
        .exec(format!("UPDATE {table} SET published_at = {sentinel}"))
        .await;
    signal(&child, "-CONT");
    tokio::time::sleep(Duration::from_millis(1500)).await;
    child.kill().unwrap();
    child.wait().unwrap();
    let kept = line
        .rig
        .db
        .scalar(format!(
            "SELECT count(*) FROM {table} WHERE published_at = {sentinel}"
        ))
        .await;
    assert_eq!(
        kept, EVENTS,
        "the relay that lost its lease stamped nothing"
    );
    assert_eq!(line.pending().await, 0);
}

/// On PostgreSQL a commit wakes an idle relay: with a poll of an hour, a message committed
/// while the relay waits is published all the same.
pub async fn a_commit_wakes_an_idle_relay<B: Broker>(name: &str) {
    let line = Line::<B, sqlx::Postgres>::open(name).await;
    let relay = line
        .relay(line.rig.broker.publisher().await, Duration::from_secs(10))
        .poll(Duration::from_secs(3600));
    let (stop, task) = run_until_stopped!(relay);
    // The relay's first round finds nothing and waits; then the commit.
    tokio::time::sleep(Duration::from_millis(300)).await;
    line.enqueue("evt_wake", "order-42", true).await;
    line.rig
        .until(
            Duration::from_secs(20),
            "the commit's notification woke the relay",
            || async { line.pending().await == 0 },
        )
        .await;
    stop.send(()).unwrap();
    let relayed = task.await.unwrap().unwrap();
    assert_eq!(relayed.published, 1);
}

/// A message for a topic no queue takes stays pending, and the relay's metrics count it.
pub async fn a_message_no_queue_takes_stays_pending_and_shows_in_the_metrics<
    B: Broker,
    DB: Fixture,
>(
    name: &str,
) {
    use crate::metrics;
    metrics::recorder();
    let line = Line::<B, DB>::open(name).await;
    // A topic no stream captures and no queue is bound to: the broker refuses, every time.
    let nowhere = Topic::new(line.rig.broker.nowhere(&line.rig.tag)).unwrap();
    for n in 0..2 {
        let message = Outgoing::new(nowhere.clone(), order_paid(&format!("evt_{n}")))
            .id(MessageId::new(format!("evt_{n}")).unwrap());
        let mut tx = line.rig.db.pool.begin().await.unwrap();
        line.outbox.enqueue(&mut *tx, &message).await.unwrap();
        tx.commit().await.unwrap();
    }
    let relay = line.relay(line.rig.broker.publisher().await, Duration::from_secs(5));
    if B::NOWHERE_FOR_GOOD {
        // No such topic can ever exist: both go to the dead letters at once, with why.
        let relayed = relay.drain().await.unwrap().unwrap();
        assert_eq!((relayed.published, relayed.dead_lettered), (0, 2));
        let dead = line.dead_letters(10).await;
        assert!(
            dead[0].reason.contains(B::MISSING_TOPIC_ADVICE),
            "{}",
            dead[0].reason
        );
        assert_eq!(line.pending().await, 0);
        return;
    }
    let refused = relay.drain().await.unwrap_err().to_string();
    assert!(
        refused.contains(B::MISSING_TOPIC_ADVICE),
        "{}: {refused}",
        B::LABEL
    );

    let (stop, running) = run_until_stopped!(relay);
    let table = line.outbox.table().to_string();
    let labels = [("table", table.as_str())];
    // The backlog is read beside the rounds, every 5 s: on a loaded machine the first read
    // can come after a slow first round, so wait for it rather than for a fixed time.
    line.rig
        .until(
            Duration::from_secs(30),
            "the relay tried twice and read its backlog",
            || async {
                let counted = metrics::counters();
                metrics::gauge("guestlist_outbox_pending", &labels).is_some()
                    && metrics::sum(&counted, "guestlist_outbox_publish_failures_total", &labels)
                        >= 4
            },
        )
        .await;
    stop.send(()).unwrap();
    let relayed = running.await.unwrap().unwrap();
    assert_eq!(relayed.published, 0);
    assert!(relayed.failures >= 2, "{relayed:?}");

    assert_eq!(
        metrics::gauge("guestlist_outbox_pending", &labels),
        Some(2.0)
    );
    let oldest = metrics::gauge("guestlist_outbox_oldest_pending_seconds", &labels).unwrap();
    assert!(oldest > 0.0, "the oldest pending message's age: {oldest}");
    let counted = metrics::counters();
    assert!(metrics::sum(&counted, "guestlist_outbox_publish_failures_total", &labels) >= 4);
    assert_eq!(
        metrics::sum(&counted, "guestlist_outbox_published_total", &labels),
        0
    );
    let stats = line.outbox.stats(&line.rig.db.pool).await.unwrap();
    assert_eq!((stats.pending, stats.rows), (2, 2), "nothing lost");
}

/// One relay publishes 120 messages on 3 keys, 50 to a batch (several requests per key on SQS):
/// the broker holds each key's messages in the order of their places, each once.
pub async fn keys_keep_their_order<B: Broker, DB: Fixture>(name: &str) {
    const MESSAGES: usize = 120;
    const KEYS: usize = 3;
    let line = Line::<B, DB>::open(name).await;
    for n in 0..MESSAGES {
        line.enqueue(&format!("evt_{n}"), &format!("order-{}", n % KEYS), true)
            .await;
    }
    let relay = line.relay(line.rig.broker.publisher().await, Duration::from_secs(30));
    while line.pending().await > 0 {
        relay.drain().await.unwrap().expect("the lease is free");
    }
    let received = line.rig.broker.received().await;
    assert_eq!(received.len(), MESSAGES, "{}: each once", B::LABEL);
    let mut places: BTreeMap<String, Vec<i64>> = BTreeMap::new();
    for message in &received {
        let key = message.key.clone().expect("every message has a key");
        places.entry(key).or_default().push(message.seq);
    }
    assert_eq!(places.len(), KEYS);
    for (key, seqs) in places {
        let expected: Vec<i64> = (1..=(MESSAGES / KEYS) as i64).collect();
        assert_eq!(seqs, expected, "{key}: in the order of its places");
    }
}
