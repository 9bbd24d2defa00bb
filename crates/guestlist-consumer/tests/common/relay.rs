//! The outbox relay's stories, on every broker and database: a producer's outbox, the relay, the
//! broker, and the consumer's inbox at the far end, counting effects.

use std::collections::{BTreeMap, BTreeSet, HashSet};
use std::hash::{BuildHasher, RandomState};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

use guestlist_consumer::Handled;
use guestlist_core::{MessageId, OrderingKey, Topic};
use guestlist_sqlx::{
    Confirmed, Outbox, OutboxMessage, Outcomes, Outgoing, Publish, PublishError, Relay,
};
use guestlist_testkit::Fixture;
use tempfile::TempDir;

use super::brokers::Broker;
use super::suite::{Rig, order_paid, run_until_stopped};

/// The environment a relay child process reads: the test's tag, its database, the file it
/// writes once the broker confirmed a batch, and how long it then holds the batch unstamped.
const CHILD_TAG: &str = "GUESTLIST_RELAY_TAG";
const CHILD_DB: &str = "GUESTLIST_RELAY_DB";
const CHILD_MARKER: &str = "GUESTLIST_RELAY_MARKER";
const CHILD_HOLD_MS: &str = "GUESTLIST_RELAY_HOLD_MS";
const CHILD_LEASE_MS: &str = "GUESTLIST_RELAY_LEASE_MS";

/// A test's producer side (its outbox) in front of the consumer's rig.
pub struct Line<B: Broker, DB: Fixture> {
    pub rig: Rig<B, DB>,
    pub outbox: Outbox<DB>,
}

impl<B: Broker, DB: Fixture> Line<B, DB> {
    pub async fn open(name: &str) -> Self {
        let line = Self::around(Rig::open(name, Duration::from_secs(30)).await);
        let table = line.outbox.table().to_string();
        for table in [
            format!("{table}_keys"),
            format!("{table}_relay"),
            format!("{table}_dead"),
            table,
        ] {
            line.rig
                .db
                .exec(format!("DROP TABLE IF EXISTS {table}"))
                .await;
        }
        line.outbox.migrate(&line.rig.db.pool).await.unwrap();
        line
    }

    fn around(rig: Rig<B, DB>) -> Self {
        let outbox = Outbox::with_table(&format!("ob_{}", rig.tag)).unwrap();
        Self { rig, outbox }
    }

    /// The line of test `tag`, from a child process.
    pub async fn attach(tag: &str, url: &str) -> Self {
        Self::around(Rig::attach(tag, url, Duration::from_secs(30)).await)
    }

    /// A relay of this outbox through `publisher`, quick to notice and to take over.
    pub fn relay<P: Publish>(&self, publisher: P, lease: Duration) -> Relay<DB, P> {
        Relay::new(self.outbox.clone(), self.rig.db.pool.clone(), publisher)
            .lease(lease)
            .poll(Duration::from_millis(20))
            .batch(50)
    }

    /// Enqueues the OrderPaid event `id` on `key`, and commits it or rolls it back.
    pub async fn enqueue(&self, id: &str, key: &str, commit: bool) {
        let message = Outgoing::new(Topic::new(self.rig.broker.topic()).unwrap(), order_paid(id))
            .id(MessageId::new(id).unwrap())
            .ordering_key(OrderingKey::new(key).unwrap());
        let mut tx = self.rig.db.pool.begin().await.unwrap();
        let enqueued = self.outbox.enqueue(&mut *tx, &message).await.unwrap();
        assert!(enqueued.added);
        if commit {
            tx.commit().await.unwrap();
        } else {
            tx.rollback().await.unwrap();
        }
    }

    pub async fn pending(&self) -> u64 {
        self.outbox.stats(&self.rig.db.pool).await.unwrap().pending
    }

    /// The oldest `limit` outgoing dead letters.
    pub async fn dead_letters(&self, limit: u32) -> Vec<guestlist_sqlx::DeadLetter> {
        self.outbox
            .dead_letters(&self.rig.db.pool, limit)
            .await
            .unwrap()
    }

    /// Runs the consumer until `events` distinct events have their effect and the queue is
    /// drained.
    pub async fn consume(&self, events: i64) -> Handled {
        let consumer = self.rig.consumer(50).await;
        let (stop, task) = run_until_stopped!(consumer);
        self.rig
            .until(
                Duration::from_secs(60),
                "every event has its effect and the queue is drained",
                || async {
                    self.rig.effects().await.1 == events && self.rig.broker.drained().await
                },
            )
            .await;
        stop.send(()).unwrap();
        task.await.unwrap().unwrap()
    }

    /// Commits `events` messages on one key, and starts a relay child that publishes them and,
    /// once the broker confirmed them, holds them unstamped for `hold` (its lease: 1 s). Returns
    /// when the broker has confirmed the batch, with the child and its marker's directory.
    async fn held_batch(&self, name: &str, events: i64, hold: Duration) -> (Child, TempDir) {
        for n in 0..events {
            self.enqueue(&format!("evt_{n}"), "order-42", true).await;
        }
        let dir = tempfile::tempdir().unwrap();
        let marker = dir.path().join("confirmed");
        let child = self.child(
            name,
            "held_relay",
            &[
                (CHILD_MARKER, marker.display().to_string()),
                (CHILD_HOLD_MS, hold.as_millis().to_string()),
                (CHILD_LEASE_MS, "1000".to_owned()),
            ],
        );
        until_marked(&marker).await;
        (child, dir)
    }

    /// Starts the relay child `child` of this test's module with `env`.
    fn child(&self, name: &str, child: &str, env: &[(&str, String)]) -> Child {
        let module = name.split('_').next().unwrap();
        let mut command = Command::new(std::env::current_exe().unwrap());
        command
            .args([&format!("{module}::{child}"), "--exact", "--ignored"])
            .env(CHILD_TAG, &self.rig.tag)
            .env(CHILD_DB, &self.rig.db.url)
            .stdout(Stdio::null());
        for (var, value) in env {
            command.env(var, value);
        }
        command
            .spawn()
            .unwrap_or_else(|err| panic!("start {child}: {err}"))
    }
}

/// A real publisher that, once the broker has confirmed a batch, writes a marker file and holds
/// the batch for a while before the relay may stamp it: the window a crash or a pause hits.
pub struct HeldAfterConfirm<P> {
    inner: P,
    marker: PathBuf,
    hold: Duration,
}

impl<P: Publish> Publish for HeldAfterConfirm<P> {
    async fn publish(&self, messages: &[OutboxMessage], outcomes: &mut Outcomes) {
        // Confirmed, but handed to the relay only after the hold.
        let mut confirmed = Outcomes::with_capacity(messages.len());
        self.inner.publish(messages, &mut confirmed).await;
        std::fs::write(&self.marker, messages.len().to_string()).unwrap();
        tokio::time::sleep(self.hold).await;
        for n in 0..messages.len() {
            if let Some(outcome) = confirmed.get(n) {
                outcomes.set(n, clone_outcome(outcome));
            }
        }
    }
}

fn clone_outcome(outcome: &Result<Confirmed, PublishError>) -> Result<Confirmed, PublishError> {
    match outcome {
        Ok(confirmed) => Ok(*confirmed),
        Err(err) => Err(PublishError::new(err.to_string())),
    }
}

/// Waits until the child wrote its marker: the broker has confirmed a batch it holds unstamped.
async fn until_marked(marker: &Path) {
    let deadline = Instant::now() + Duration::from_secs(30);
    while !marker.exists() {
        assert!(Instant::now() < deadline, "the relay never published");
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}

fn signal(child: &Child, signal: &str) {
    let sent = Command::new("kill")
        .args([signal, &child.id().to_string()])
        .status()
        .unwrap();
    assert!(sent.success(), "kill {signal}");
}

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

pub async fn sigkill_between_confirm_and_stamp_publishes_again_without_a_second_effect<
    B: Broker,
    DB: Fixture,
>(
    name: &str,
) {
    const EVENTS: i64 = 20;
    let line = Line::<B, DB>::open(name).await;
    let (mut child, _marker) = line
        .held_batch(name, EVENTS, Duration::from_secs(600))
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
    tokio::time::sleep(Duration::from_millis(1100)).await;
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

pub async fn a_relay_that_lost_its_lease_stamps_nothing<B: Broker, DB: Fixture>(name: &str) {
    const EVENTS: i64 = 5;
    let line = Line::<B, DB>::open(name).await;
    let (mut child, _marker) = line
        .held_batch(name, EVENTS, Duration::from_millis(300))
        .await;
    // Paused between the broker's confirmation and its stamp, past the end of its lease.
    signal(&child, "-STOP");
    tokio::time::sleep(Duration::from_millis(1500)).await;
    let relay = line.relay(line.rig.broker.publisher().await, Duration::from_secs(5));
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

pub async fn two_relays_one_killed_again_and_again_keep_each_keys_order<B: Broker, DB: Fixture>(
    name: &str,
) {
    const MESSAGES: usize = 2_000;
    const WRITERS: usize = 4;
    const KEYS: usize = 10;
    let line = Arc::new(Line::<B, DB>::open(name).await);
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
        let holder = line
            .outbox
            .stats(&line.rig.db.pool)
            .await
            .unwrap()
            .lease
            .holder;
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
    let taken = line
        .outbox
        .stats(&line.rig.db.pool)
        .await
        .unwrap()
        .lease
        .token;
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

    let received = line.rig.broker.received().await;
    let ids: HashSet<&str> = received.iter().map(|m| m.id.as_str()).collect();
    assert_eq!(ids.len(), MESSAGES, "{}: nothing lost", B::LABEL);
    // Repeats aside, each key's messages arrived in the order of their places, all of them.
    let mut firsts: BTreeMap<String, Vec<i64>> = BTreeMap::new();
    let mut seen: BTreeSet<(String, i64)> = BTreeSet::new();
    for message in &received {
        let key = message.key.clone().expect("every message has a key");
        if seen.insert((key.clone(), message.seq)) {
            firsts.entry(key).or_default().push(message.seq);
        }
    }
    assert_eq!(firsts.len(), KEYS);
    for (key, seqs) in firsts {
        let expected: Vec<i64> = (1..=seqs.len() as i64).collect();
        assert_eq!(seqs, expected, "{key}: in commit order, none missing");
    }
    eprintln!(
        "{}: {} messages on the broker for {MESSAGES} ({} repeats), {kills_mid_stream} kills mid-stream",
        B::LABEL,
        received.len(),
        received.len() - MESSAGES
    );
}

/// The relay a test kills or pauses between the broker's confirmation and the stamp.
pub async fn held_relay<B: Broker, DB: Fixture>() {
    let (Ok(tag), Ok(url), Ok(marker)) = (
        std::env::var(CHILD_TAG),
        std::env::var(CHILD_DB),
        std::env::var(CHILD_MARKER),
    ) else {
        eprintln!("held_relay runs only as a relay test's child process");
        return;
    };
    let line = Line::<B, DB>::attach(&tag, &url).await;
    let held = HeldAfterConfirm {
        inner: line.rig.broker.publisher().await,
        marker: marker.into(),
        hold: Duration::from_millis(env_ms(CHILD_HOLD_MS)),
    };
    let relay = line.relay(held, Duration::from_millis(env_ms(CHILD_LEASE_MS)));
    relay.run(std::future::pending()).await.unwrap();
}

/// A relay the chaos test runs, two at a time, and kills.
pub async fn chaos_relay<B: Broker, DB: Fixture>() {
    let (Ok(tag), Ok(url)) = (std::env::var(CHILD_TAG), std::env::var(CHILD_DB)) else {
        eprintln!("chaos_relay runs only as the chaos test's child process");
        return;
    };
    let line = Line::<B, DB>::attach(&tag, &url).await;
    let publisher = line.rig.broker.publisher().await;
    let relay = line
        .relay(publisher, Duration::from_millis(env_ms(CHILD_LEASE_MS)))
        .holder(relay_name(std::process::id()));
    relay.run(std::future::pending()).await.unwrap();
}

/// The lease holder's name of the chaos relay with process id `pid`.
fn relay_name(pid: u32) -> String {
    format!("chaos-relay-{pid}")
}

fn env_ms(var: &str) -> u64 {
    std::env::var(var).unwrap().parse().unwrap()
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

pub async fn a_message_no_queue_takes_stays_pending_and_shows_in_the_metrics<
    B: Broker,
    DB: Fixture,
>(
    name: &str,
) {
    use guestlist_testkit::metrics;
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
