//! The relay's failure stories, on every broker and database: a message the broker refuses
//! touches its own ordering key only, a message it can never take is dead-lettered at once, and
//! refusals back off. The rounds that outlast their lease are in `lapses`.

use std::collections::{BTreeMap, HashMap};
use std::time::{Duration, Instant};

use crate::Fixture;
use guestlist_core::{MessageId, OrderingKey, Topic};
use guestlist_sqlx::{OutboxMessage, Outcomes, Outgoing, Publish, Relayed};

use super::line::Line;
use crate::brokers::order_paid;
use crate::brokers::{Broker, Received};
use crate::run_until_stopped;

impl<B: Broker, DB: Fixture> Line<B, DB> {
    /// Enqueues the OrderPaid event `id` for `topic` (the test's own when `None`) on `key`.
    pub async fn enqueue_to(&self, topic: Option<&str>, id: &str, key: Option<&str>) {
        self.enqueue_payload(topic, id, key, order_paid(id)).await;
    }

    /// Enqueues `payload` as message `id` for `topic` on `key`, and commits it.
    pub async fn enqueue_payload(
        &self,
        topic: Option<&str>,
        id: &str,
        key: Option<&str>,
        payload: Vec<u8>,
    ) {
        let topic = topic.map_or_else(|| self.rig.broker.topic(), str::to_owned);
        let mut message =
            Outgoing::new(Topic::new(topic).unwrap(), payload).id(MessageId::new(id).unwrap());
        if let Some(key) = key {
            message = message.ordering_key(OrderingKey::new(key).unwrap());
        }
        let mut tx = self.rig.db.pool.begin().await.unwrap();
        assert!(self.outbox.enqueue(&mut *tx, &message).await.unwrap().added);
        tx.commit().await.unwrap();
    }

    /// Runs `relay`-like settings until `done` holds (at most a minute), then `linger` more,
    /// and stops it.
    pub async fn run_relay<P, F, Fut>(
        &self,
        relay: guestlist_sqlx::Relay<DB, P>,
        linger: Duration,
        done: F,
    ) -> Relayed
    where
        P: Publish + 'static,
        F: Fn() -> Fut,
        Fut: std::future::Future<Output = bool>,
    {
        let (stop, running) = run_until_stopped!(relay);
        self.rig
            .until(Duration::from_secs(60), "the relay got there", done)
            .await;
        tokio::time::sleep(linger).await;
        stop.send(()).unwrap();
        running.await.unwrap().unwrap()
    }
}

/// How many times each id reached the broker, and each key's places in the order the broker
/// holds them.
fn tally(received: &[Received]) -> (HashMap<String, usize>, BTreeMap<String, Vec<i64>>) {
    let mut copies: HashMap<String, usize> = HashMap::new();
    let mut places: BTreeMap<String, Vec<i64>> = BTreeMap::new();
    for message in received {
        *copies.entry(message.id.clone()).or_default() += 1;
        if let Some(key) = &message.key {
            places.entry(key.clone()).or_default().push(message.seq);
        }
    }
    (copies, places)
}

/// Key `stuck`'s head goes to a topic the broker takes nowhere, its five followers to the
/// test's topic; 31 messages without a key go nowhere too (a topic deployed before its
/// stream); 10 messages on other keys go to the test's topic. Batches of 20, so that the
/// refused messages fill whole batches. The followers in the head's own batch are not sent
/// while it is refused (a key's next message goes out only once the broker confirmed the one
/// before), so none reaches the broker before it; they and five more, enqueued once the head was
/// refused, wait behind it until it is dead-lettered, then go out in their order; every message
/// reaches the broker once.
pub async fn a_refused_message_holds_back_its_own_key_and_the_rest_go_out_once<
    B: Broker,
    DB: Fixture,
>(
    name: &str,
) {
    let line = Line::<B, DB>::open(name).await;
    let nowhere = line.rig.broker.nowhere(&line.rig.tag);
    line.enqueue_to(Some(&nowhere), "evt_head", Some("stuck"))
        .await;
    for n in 0..5 {
        line.enqueue_to(None, &format!("evt_follow_{n}"), Some("stuck"))
            .await;
    }
    for n in 0..31 {
        line.enqueue_to(Some(&nowhere), &format!("evt_lost_{n}"), None)
            .await;
    }
    for n in 0..10 {
        line.enqueue_to(None, &format!("evt_good_{n}"), Some(&format!("good-{n}")))
            .await;
    }

    // The refused keep being refused: the ten on other keys go out and are stamped meanwhile.
    let patient = line
        .relay(line.rig.broker.publisher().await, Duration::from_secs(30))
        .batch(20)
        .max_attempts(1_000)
        .backoff(Duration::from_millis(100), Duration::from_millis(400));
    let (stop, running) = run_until_stopped!(patient);
    let expected = if B::NOWHERE_FOR_GOOD { 20 } else { 10 };
    line.rig
        .until(
            Duration::from_secs(60),
            "the good ones are stamped",
            || async { line.published_of(47).await >= 10 },
        )
        .await;
    for n in 0..5 {
        line.enqueue_to(None, &format!("evt_late_{n}"), Some("stuck"))
            .await;
    }
    if B::NOWHERE_FOR_GOOD {
        line.rig
            .until(
                Duration::from_secs(60),
                "the late ones are stamped",
                || async { line.published_of(52).await >= 20 },
            )
            .await;
    }
    // Retries come every 0.4 s at most: the late followers would have gone out by now.
    tokio::time::sleep(Duration::from_millis(1_500)).await;
    stop.send(()).unwrap();
    let first = running.await.unwrap().unwrap();
    assert_eq!(
        first.published,
        expected,
        "{}: the others, and no follower of the refused head: {first:?}",
        B::LABEL
    );
    if !B::NOWHERE_FOR_GOOD {
        assert_eq!(first.dead_lettered, 0, "{}: {first:?}", B::LABEL);
        assert_eq!(
            line.pending().await,
            42,
            "{}: the refused and the held, its followers among them",
            B::LABEL
        );
    }

    // Refused at once now: the head and the lost go to the dead letters, the late ones go out.
    let hasty = line
        .relay(line.rig.broker.publisher().await, Duration::from_secs(30))
        .batch(20)
        .max_attempts(1)
        .backoff(Duration::from_millis(50), Duration::from_millis(100));
    let second = line
        .run_relay(hasty, Duration::from_millis(500), || async {
            line.pending().await == 0
        })
        .await;
    let relayed = first.published + second.published;
    assert_eq!(relayed, 20, "{}: {first:?} then {second:?}", B::LABEL);
    assert_eq!(
        first.duplicates + second.duplicates,
        0,
        "{}: nothing was published twice",
        B::LABEL
    );
    let dead = line.dead_letters(100).await;
    assert_eq!(dead.len(), 32, "{}: the head and the 31 lost", B::LABEL);
    for letter in &dead {
        assert!(
            letter.reason.contains(B::MISSING_TOPIC_ADVICE),
            "{}: {}",
            B::LABEL,
            letter.reason
        );
        assert_eq!(letter.topic, nowhere);
    }

    let received = line.rig.broker.received().await;
    let (copies, places) = tally(&received);
    assert_eq!(received.len(), 20, "{}: each once: {copies:?}", B::LABEL);
    assert!(copies.values().all(|n| *n == 1), "{}: {copies:?}", B::LABEL);
    assert_eq!(
        places.get("stuck"),
        Some(&(2..=11).collect::<Vec<i64>>()),
        "{}: the followers in their order",
        B::LABEL
    );
}

/// A message the broker can never take (too large for it, or an id it cannot carry), first on
/// its key, among a thousand on other keys: it goes to the dead letters with why, at once, and
/// every other message reaches the broker once, its key's followers included, in order.
pub async fn a_message_never_taken_is_dead_lettered_and_the_rest_go_out_once<
    B: Broker,
    DB: Fixture,
>(
    name: &str,
) {
    let others: usize = if DB::LABEL == "PostgreSQL" {
        B::RELAY_STORY_EVENTS
    } else {
        B::RELAY_STORY_EVENTS / 5
    };
    let line = Line::<B, DB>::open(name).await;
    match B::TOO_LARGE {
        Some(bytes) => {
            line.enqueue_payload(None, "evt_big", Some("big"), vec![b'x'; bytes])
                .await
        }
        None => {
            // A header name over AMQP's 255 bytes; and, where the column holds it, an id over
            // them too, as another language's writer could put there (it used to panic).
            let message = Outgoing::new(
                Topic::new(line.rig.broker.topic()).unwrap(),
                order_paid("evt_big"),
            )
            .id(MessageId::new("evt_big").unwrap())
            .ordering_key(OrderingKey::new("big").unwrap())
            .header("x".repeat(300), "too long a name");
            let mut tx = line.rig.db.pool.begin().await.unwrap();
            line.outbox.enqueue(&mut *tx, &message).await.unwrap();
            tx.commit().await.unwrap();
            if DB::LABEL != "MariaDB/MySQL" {
                let long = "x".repeat(300);
                line.rig
                    .db
                    .exec(format!(
                        "UPDATE {} SET message_id = '{long}' WHERE message_id = 'evt_big'",
                        line.outbox.table()
                    ))
                    .await;
            }
        }
    }
    for n in 0..2 {
        line.enqueue_to(None, &format!("evt_after_{n}"), Some("big"))
            .await;
    }
    for n in 0..others {
        line.enqueue_to(None, &format!("evt_{n}"), Some(&format!("k-{}", n % 50)))
            .await;
    }
    let relay = line
        .relay(line.rig.broker.publisher().await, Duration::from_secs(30))
        .batch(100);
    let mut relayed = Relayed::default();
    while line.pending().await > 0 {
        let round = relay.drain().await.unwrap().expect("the lease is free");
        relayed.published += round.published;
        relayed.duplicates += round.duplicates;
        relayed.dead_lettered += round.dead_lettered;
    }
    assert_eq!(relayed.dead_lettered, 1, "{}: {relayed:?}", B::LABEL);
    assert_eq!(relayed.published as usize, others + 2, "{}", B::LABEL);
    let dead = line.dead_letters(10).await;
    assert_eq!(dead.len(), 1);
    assert!(
        dead[0].reason.starts_with("refused for good"),
        "{}: {}",
        B::LABEL,
        dead[0].reason
    );
    assert_eq!(dead[0].ordering_key.as_deref(), Some("big"));

    let received = line.rig.broker.received().await;
    let (copies, places) = tally(&received);
    assert_eq!(received.len(), others + 2, "{}: each once", B::LABEL);
    assert!(copies.values().all(|n| *n == 1), "{}", B::LABEL);
    assert_eq!(places.get("big"), Some(&vec![2, 3]), "{}", B::LABEL);
    for (key, seqs) in &places {
        assert!(seqs.windows(2).all(|w| w[0] < w[1]), "{key}: {seqs:?}");
    }

    // Fixed or not, an operator puts it back; it is refused for good again, and stays dead.
    assert!(
        line.outbox
            .retry_dead(&line.rig.db.pool, dead[0].id)
            .await
            .unwrap()
    );
    assert_eq!(line.pending().await, 1);
    let again = relay.drain().await.unwrap().unwrap();
    assert_eq!((again.published, again.dead_lettered), (0, 1));
    let dead = line.dead_letters(10).await;
    assert!(
        line.outbox
            .drop_dead(&line.rig.db.pool, dead[0].id)
            .await
            .unwrap()
    );
    assert_eq!(line.outbox.dead_count(&line.rig.db.pool).await.unwrap(), 0);
}

/// A publisher that notes when each round's publish began.
struct Tries<P> {
    inner: P,
    at: std::sync::Arc<std::sync::Mutex<Vec<Instant>>>,
}

impl<P: Publish> Publish for Tries<P> {
    fn check(&self, message: &OutboxMessage) -> Result<(), guestlist_sqlx::PublishError> {
        self.inner.check(message)
    }

    async fn publish(&self, messages: &[OutboxMessage], outcomes: &mut Outcomes) {
        self.at.lock().unwrap().push(Instant::now());
        self.inner.publish(messages, outcomes).await;
    }
}

/// One message the broker keeps refusing: its retries wait 0.2 s, 0.4 s, 0.8 s, 1.6 s…, not a
/// flat 0.2 s. Told by the gaps between tries, each at least its pause, so that a slow broker
/// (each try's own time adds to its gap) cannot make it pass or fail.
pub async fn a_refused_messages_retries_back_off_doubling<B: Broker, DB: Fixture>(name: &str) {
    if B::NOWHERE_FOR_GOOD {
        return; // the broker refuses such a topic for good: dead at the first try
    }
    let line = Line::<B, DB>::open(name).await;
    let nowhere = line.rig.broker.nowhere(&line.rig.tag);
    line.enqueue_to(Some(&nowhere), "evt_refused", None).await;
    let at = std::sync::Arc::default();
    let tries = Tries {
        inner: line.rig.broker.publisher().await,
        at: std::sync::Arc::clone(&at),
    };
    let relay = line.relay(tries, Duration::from_secs(30));
    let relayed = line
        .run_relay(relay, Duration::ZERO, || async {
            at.lock().unwrap().len() >= 5
        })
        .await;
    let at = at.lock().unwrap().clone();
    let gaps: Vec<Duration> = at.windows(2).map(|w| w[1] - w[0]).collect();
    // Pauses of 0.2, 0.4, 0.8 and 1.6 s, less a tenth for the timer's grain.
    for (n, gap) in gaps.iter().take(4).enumerate() {
        let pause = Duration::from_millis(180) * 2u32.pow(n as u32);
        assert!(
            *gap >= pause,
            "{}: try {} came {gap:?} after the one before, under its pause of {pause:?}: {gaps:?}",
            B::LABEL,
            n + 2
        );
    }
    assert!(relayed.failures >= 4, "{}: {relayed:?}", B::LABEL);
    assert_eq!(relayed.dead_lettered, 0);
    assert_eq!(line.pending().await, 1, "still pending, nothing lost");
}
