//! Four relays share an outbox's shards while they join one by one, are killed, stopped and
//! paused: every message arrives, each key in commit order, and no shard is ever published by two
//! relays at once.

use std::collections::{BTreeMap, BTreeSet};
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::Child;
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use guestlist_sqlx::{OutboxMessage, Outcomes, Publish, PublishError};

use super::held::{signal, until_exited, until_stopped};
use super::line::*;
use crate::Fixture;
use crate::brokers::Broker;
use crate::brokers::child::parent;

/// Where a sharing relay child writes what it hands the broker.
const CHILD_FENCES: &str = "GUESTLIST_RELAY_FENCES";

/// Four relay processes on one outbox of 16 shards, while four writers commit messages on 200
/// keys (ten to a transaction): they join a second apart and share the shards; then one is SIGKILLed, one SIGSTOPped
/// past its lease and resumed, one SIGTERMed and the last joined SIGKILLed, so that the one
/// resumed ends with every shard. Every committed message reaches the broker, each key's in
/// commit order (repeats are counted and reported), and the publishes each relay wrote down
/// with their shard and fencing token show no shard published under two tokens at once: each
/// token's publishes end before the next token's begin.
pub async fn four_relays_share_the_shards_through_joins_kills_and_a_pause<
    B: Broker,
    DB: Fixture,
>(
    name: &str,
) {
    const WRITERS: usize = 4;
    const KEYS: usize = 200;
    let (messages, lease_ms) = B::SHARE_STORY;
    let lease = Duration::from_millis(lease_ms);
    let line = Arc::new(Line::<B, DB>::open(name).await);
    let fences = tempfile::tempdir().unwrap();
    let env = [
        (CHILD_LEASE_MS, lease_ms.to_string()),
        (CHILD_FENCES, fences.path().display().to_string()),
    ];
    // Ten messages a transaction; the stream lasts about 8 s and four leases (the moves take
    // about 7 s and two and a half), so that every move lands while it flows. Each writer has
    // keys of its own (200 is a multiple of 4).
    const BATCH: usize = 10;
    let stream = Duration::from_secs(8) + lease * 4;
    let pause = stream * (WRITERS * BATCH) as u32 / messages as u32;
    let writers: Vec<_> = (0..WRITERS)
        .map(|writer| {
            let line = Arc::clone(&line);
            tokio::spawn(async move {
                let mine: Vec<usize> = (writer..messages).step_by(WRITERS).collect();
                for batch in mine.chunks(BATCH) {
                    let events: Vec<(String, String)> = batch
                        .iter()
                        .map(|n| (format!("evt_{n}"), format!("order-{}", n % KEYS)))
                        .collect();
                    line.enqueue_all(&events).await;
                    tokio::time::sleep(pause).await;
                }
            })
        })
        .collect();
    let second = Duration::from_secs(1);
    let mut relays: Vec<Child> = Vec::new();
    for _ in 0..4 {
        relays.push(line.child(name, "share_relay", &env));
        tokio::time::sleep(second).await;
    }
    let moves = async {
        relays[0].kill().expect("SIGKILL the first relay");
        relays[0].wait().unwrap();
        tokio::time::sleep(second).await;
        signal(&relays[1], "-STOP");
        until_stopped(&relays[1]).await;
        tokio::time::sleep(lease * 5 / 2).await;
        signal(&relays[1], "-CONT");
        tokio::time::sleep(second).await;
        signal(&relays[2], "-TERM");
        let stopped = until_exited(
            &mut relays[2],
            Duration::from_secs(60),
            "a relay sent SIGTERM stops within its shutdown grace",
        )
        .await;
        assert!(
            stopped.success(),
            "SIGTERM stops a relay cleanly: {stopped}"
        );
        tokio::time::sleep(second).await;
        // The last move lands while messages still flow: written, or still to be published
        // (on moto the clean stop before it can outlast the writers).
        let flowing =
            writers.iter().any(|writer| !writer.is_finished()) || line.pending().await > 0;
        relays[3]
            .kill()
            .expect("SIGKILL the last relay that joined");
        relays[3].wait().unwrap();
        flowing
    };
    assert!(
        moves.await,
        "{}: the moves landed while messages flowed",
        B::LABEL
    );
    for writer in writers {
        tokio::time::timeout(Duration::from_secs(120), writer)
            .await
            .expect("the writers commit every message within two minutes")
            .unwrap();
    }
    line.rig
        .until(
            Duration::from_secs(180),
            "the relay resumed publishes every message",
            || async { line.pending().await == 0 },
        )
        .await;
    // The killed relays' heartbeats end with their leases: then the one left runs alone.
    let survivor = relay_name(relays[1].id());
    line.rig
        .until(
            Duration::from_secs(30),
            "the relay resumed runs alone and holds every shard",
            || async {
                let stats = line.outbox.stats(&line.rig.db.pool).await.unwrap();
                let holders: Vec<&str> = stats.relays.iter().map(|r| r.holder.as_str()).collect();
                holders == [survivor.as_str()] && stats.relays[0].shards.len() == 16
            },
        )
        .await;
    relays[1].kill().unwrap();
    relays[1].wait().unwrap();

    let received = line.assert_received_in_key_order(messages, KEYS).await;
    let (publishers, hand_overs) = assert_fenced(fences.path());
    // Every relay but, on a loaded machine, the last to join (killed a few seconds after it
    // came) published its share.
    assert!(
        publishers >= 3,
        "{}: the relays that joined published their shares ({publishers} did)",
        B::LABEL
    );
    eprintln!(
        "{}: {received} messages on the broker for {messages} ({} repeats), {hand_overs} \
         hand-overs of a shard between tokens",
        B::LABEL,
        received - messages
    );
}

/// Reads what the relays wrote down (each line a publish: shard, token, microseconds since the
/// epoch when its batch went to the broker), and checks that each token belongs to one relay
/// and that, shard by shard, a token's batches all go before the next token's first, but for
/// at most one: the batch a relay had checked its lease for when it was stopped, sent once it
/// went on (no check on the relay's side can close that gap; the stamp's fence and the
/// consumers' inbox absorb what it sends again). A relay that went on publishing batches on a
/// lost lease fails it. The relays that published, and how many times a shard went from one
/// token to the next.
fn assert_fenced(dir: &Path) -> (usize, usize) {
    // (shard, token) -> (relay, the times its batches went)
    let mut spans: BTreeMap<(u32, i64), (String, BTreeSet<u128>)> = BTreeMap::new();
    let mut publishers = BTreeSet::new();
    for file in std::fs::read_dir(dir).unwrap() {
        let path = file.unwrap().path();
        let relay = path.file_stem().unwrap().to_string_lossy().into_owned();
        for line in std::fs::read_to_string(&path).unwrap().lines() {
            let fields: Vec<&str> = line.split(' ').collect();
            let [shard, token, at] = fields[..] else {
                continue; // the last line of a relay killed mid-write
            };
            let (Ok(shard), Ok(token), Ok(at)) = (shard.parse(), token.parse(), at.parse()) else {
                continue;
            };
            publishers.insert(relay.clone());
            let span = spans
                .entry((shard, token))
                .or_insert_with(|| (relay.clone(), BTreeSet::new()));
            assert_eq!(span.0, relay, "shard {shard} token {token}: one relay");
            span.1.insert(at);
        }
    }
    let mut hand_overs = 0;
    let mut in_flight = 0;
    let mut last: Option<(u32, i64, &BTreeSet<u128>)> = None;
    for ((shard, token), (_, batches)) in &spans {
        let first = *batches.first().expect("a token that published");
        if let Some((prev_shard, prev_token, prev)) = last
            && prev_shard == *shard
        {
            hand_overs += 1;
            let late: Vec<&u128> = prev.range(first..).collect();
            assert!(
                late.len() <= 1,
                "shard {shard}: token {prev_token} sent {} batches (at {late:?}) after token \
                 {token}'s first at {first}: two relays at once",
                late.len()
            );
            in_flight += late.len();
        }
        last = Some((*shard, *token, batches));
    }
    if in_flight > 0 {
        eprintln!(
            "{in_flight} batches were in flight across a hand-over (a relay stopped past its check)"
        );
    }
    (publishers.len(), hand_overs)
}

/// A publisher that writes down each message's shard and token before handing it on.
struct Fenced<P> {
    inner: P,
    log: Mutex<std::io::BufWriter<std::fs::File>>,
}

impl<P: Publish> Publish for Fenced<P> {
    fn check(&self, message: &OutboxMessage) -> Result<(), PublishError> {
        self.inner.check(message)
    }

    async fn publish(&self, messages: &[OutboxMessage], outcomes: &mut Outcomes) {
        {
            let at = SystemTime::now()
                .duration_since(UNIX_EPOCH)
                .unwrap()
                .as_micros();
            let mut log = self.log.lock().unwrap();
            for message in messages {
                writeln!(log, "{} {} {at}", message.shard, message.token).unwrap();
            }
            log.flush().unwrap();
        }
        self.inner.publish(messages, outcomes).await;
    }
}

/// A relay of the sharing story: runs until SIGTERM, then gives its shards back.
pub async fn share_relay<B: Broker, DB: Fixture>() {
    // Before anything else: a SIGTERM that comes while the child still connects stops it
    // cleanly too.
    let mut term = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())
        .expect("a SIGTERM handler");
    let Some((tag, url)) = parent("share_relay") else {
        return;
    };
    let line = Line::<B, DB>::attach(&tag, &url).await;
    let dir = PathBuf::from(std::env::var(CHILD_FENCES).expect("the story names the directory"));
    let name = relay_name(std::process::id());
    let file = std::fs::File::create(dir.join(format!("{name}.log"))).unwrap();
    let fenced = Fenced {
        inner: line.rig.broker.publisher().await,
        log: Mutex::new(std::io::BufWriter::new(file)),
    };
    let relay = line
        .relay(fenced, Duration::from_millis(env_ms(CHILD_LEASE_MS)))
        .holder(name);
    relay
        .run(async move {
            term.recv().await;
        })
        .await
        .unwrap();
}
