//! Keys in parallel: a consumer at a concurrency above one runs different keys at once and each
//! key's messages in order, and a key whose message fails or defers holds back only itself.

use std::sync::Arc;
use std::sync::atomic::{AtomicI64, AtomicUsize, Ordering};
use std::time::Duration;

use guestlist_consumer::{Consumer, Handler, IdFrom, KeyFrom, Message};
use guestlist_core::{Deferral, HandlerName};

use crate::Fixture;
use crate::brokers::Broker;
use crate::brokers::rig::Rig;
use crate::run_until_stopped;

/// The header the stories' messages carry their key in.
const KEY_HEADER: &str = "order-key";

/// The keys stories' handler: one row per fresh event with its key, its place among its key's
/// messages, when it ran (a counter of its process, so that a key's rows show the order its
/// messages ran in) and the latest place among its key's rows it found written (so that a key's
/// rows show their order across processes too); "not yet" for an event's first deliveries where
/// it asks, a failure for poison.
pub struct Keyed {
    table: Arc<str>,
    clock: Arc<AtomicI64>,
    running: Arc<AtomicUsize>,
    /// The most handler runs at once.
    most: Arc<AtomicUsize>,
}

/// One handler run in progress, counted out when it ends, however it ends.
struct Running(Arc<AtomicUsize>);

impl Drop for Running {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::SeqCst);
    }
}

impl<DB: Fixture> Handler<DB> for Keyed {
    type Error = anyhow::Error;

    async fn handle(&self, tx: &mut DB::Connection, message: &Message) -> anyhow::Result<()> {
        let now = self.running.fetch_add(1, Ordering::SeqCst) + 1;
        let _running = Running(Arc::clone(&self.running));
        self.most.fetch_max(now, Ordering::SeqCst);
        let event: serde_json::Value = serde_json::from_slice(&message.payload)?;
        if event["kind"] == "poison" {
            anyhow::bail!("poison pill: the order has no lines");
        }
        if let Some(until) = event["not_yet_until"].as_u64()
            && u64::from(message.delivery_count) <= until
        {
            // Longer than the other keys' fifty events take on a loaded machine (on moto, late
            // in a CI run, they once took more than the three seconds this was).
            let wait = event["not_yet_ms"]
                .as_u64()
                .map_or(Duration::from_secs(10), Duration::from_millis);
            let not_yet = Deferral::new(wait, "stock is being counted");
            return Err(guestlist_carry::defer(not_yet).into());
        }
        if let Some(ms) = event["slow_ms"].as_u64() {
            tokio::time::sleep(Duration::from_millis(ms)).await;
        }
        let ran = self.clock.fetch_add(1, Ordering::SeqCst);
        // The stories' ids and keys are letters, digits and underscores.
        let key = event["key"].as_str().unwrap_or_default();
        let insert = format!(
            "INSERT INTO {t} (event, k, seq, ran, prev) \
             SELECT '{}', '{key}', {}, {ran}, COALESCE(MAX(seq), -1) FROM {t} WHERE k = '{key}'",
            message.id,
            event["seq"].as_i64().unwrap_or_default(),
            t = self.table,
        );
        DB::exec(tx, insert).await?;
        Ok(())
    }
}

/// A story's rig, its table of keyed effects and its handler's counters.
pub(super) struct Keys<B: Broker, DB: Fixture> {
    pub(super) rig: Rig<B, DB>,
    pub(super) table: Arc<str>,
    most: Arc<AtomicUsize>,
}

impl<B: Broker, DB: Fixture> Keys<B, DB> {
    /// A fresh queue, inbox and table of keyed effects for the story `name`.
    pub(super) async fn open(name: &str, ack_wait: Duration) -> Self {
        let rig = Rig::<B, DB>::open(name, ack_wait).await;
        let keys = Self::around(rig);
        let table = &keys.table;
        keys.rig
            .db
            .exec(format!("DROP TABLE IF EXISTS {table}"))
            .await;
        keys.rig
            .db
            .exec(format!(
                "CREATE TABLE {table} (event TEXT NOT NULL, k TEXT NOT NULL, seq INT NOT NULL, \
                 ran BIGINT NOT NULL, prev INT NOT NULL)"
            ))
            .await;
        let index = format!("CREATE INDEX {table}_k ON {table} (k, seq)");
        keys.rig.db.exec(index).await;
        keys
    }

    /// The story's queue and tables, from its child process.
    pub(super) async fn attach(tag: &str, url: &str, ack_wait: Duration) -> Self {
        Self::around(Rig::attach(tag, url, ack_wait).await)
    }

    fn around(rig: Rig<B, DB>) -> Self {
        Self {
            table: Arc::from(format!("keyed_{}", rig.tag)),
            rig,
            most: Arc::default(),
        }
    }

    /// Publishes event `seq` of `key`, with `extra` JSON fields.
    pub(super) async fn publish(&self, key: &str, seq: usize, extra: &str) {
        let payload = format!(r#"{{"id":"evt_{key}_{seq}","key":"{key}","seq":{seq}{extra}}}"#);
        self.rig
            .broker
            .publish_keyed(payload.as_bytes(), KEY_HEADER, key)
            .await;
    }

    /// A consumer of the story's queue at `concurrency`, keyed by the header.
    pub(super) async fn consumer(&self, concurrency: usize) -> Consumer<B::Source, DB, Keyed> {
        self.consumer_on(self.rig.db.pool.clone(), concurrency)
            .await
    }

    /// [`Keys::consumer`] on `pool`.
    pub(super) async fn consumer_on(
        &self,
        pool: sqlx::Pool<DB>,
        concurrency: usize,
    ) -> Consumer<B::Source, DB, Keyed> {
        Consumer::with_handler(
            self.rig.broker.source().await,
            pool,
            self.rig.inbox.clone(),
            HandlerName::new("warehouse").unwrap(),
            IdFrom::JsonField("/id".to_owned()),
            Keyed {
                table: Arc::clone(&self.table),
                clock: Arc::default(),
                running: Arc::default(),
                most: Arc::clone(&self.most),
            },
        )
        .keys(KeyFrom::Header(KEY_HEADER.to_owned()))
        .concurrency(concurrency)
    }

    /// Rows of the table `where_`.
    pub(super) async fn count(&self, where_: &str) -> i64 {
        let sql = format!("SELECT count(*) FROM {} WHERE {where_}", self.table);
        self.rig.db.scalar(sql).await
    }

    /// Pairs of one key's rows that ran out of their key's order.
    pub(super) async fn out_of_order(&self, where_: &str) -> i64 {
        let t = &self.table;
        let sql = format!(
            "SELECT count(*) FROM {t} a JOIN {t} b ON a.k = b.k AND a.seq < b.seq AND a.ran > b.ran WHERE {where_}"
        );
        self.rig.db.scalar(sql).await
    }
}

/// Twenty keys of ten messages each, interleaved, through a consumer at concurrency 16: every
/// message has one effect, each key's in the order published, and handlers ran at once.
pub async fn keys_in_parallel_each_key_in_order<B: Broker, DB: Fixture>(name: &str) {
    let keys = Keys::<B, DB>::open(name, Duration::from_secs(30)).await;
    let (key_count, per_key) = (20, 10);
    for seq in 0..per_key {
        for key in 0..key_count {
            keys.publish(&format!("k{key}"), seq, r#","slow_ms":5"#)
                .await;
        }
    }
    let all = (key_count * per_key) as i64;
    let (stop, task) = run_until_stopped!(keys.consumer(16).await.batch_size(100));
    keys.rig
        .until(
            Duration::from_secs(60),
            "every event is handled",
            || async { keys.count("1 = 1").await >= all },
        )
        .await;
    let handled = keys
        .rig
        .stop_drained(stop, task, Duration::from_secs(30))
        .await;
    assert_eq!(keys.count("1 = 1").await, all, "one effect per event");
    let distinct = format!("SELECT count(DISTINCT event) FROM {}", keys.table);
    assert_eq!(keys.rig.db.scalar(distinct).await, all, "each event once");
    assert_eq!(handled.fresh, all as u64);
    assert_eq!(keys.out_of_order("1 = 1").await, 0, "each key in its order");
    // SQLite has one writer at a time: its lanes take turns (a handler in steps runs its
    // external calls outside any transaction, and so at once there too).
    if DB::CONCURRENT_WRITERS {
        let most = keys.most.load(Ordering::SeqCst);
        assert!(
            most >= 2,
            "{} on {}: handlers ran one at a time",
            B::LABEL,
            DB::LABEL
        );
    }
}

/// A key whose first message is poison and a key whose first message says "not yet" wait, each
/// behind its own first message, while every other key's messages are handled meanwhile; then
/// the poison is dead-lettered, the deferred message handled, and each waiting key's messages
/// run after it.
pub async fn a_failing_key_and_a_deferring_key_hold_back_only_themselves<B: Broker, DB: Fixture>(
    name: &str,
) {
    let keys = Keys::<B, DB>::open(name, Duration::from_secs(30)).await;
    keys.publish("poison", 0, r#","kind":"poison""#).await;
    keys.publish("later", 0, r#","not_yet_until":1"#).await;
    let (others, per_key) = (10, 5);
    for seq in 0..per_key {
        for key in ["poison", "later"] {
            keys.publish(key, seq + 1, "").await;
        }
        for key in 0..others {
            keys.publish(&format!("k{key}"), seq, "").await;
        }
    }
    // The poison fails at once, then after six seconds, twice: dead-lettered after about
    // twelve, well after the other keys' events are handled.
    let consumer = keys
        .consumer(16)
        .await
        .batch_size(100)
        .max_deliveries(3)
        .backoff(Duration::from_secs(6), Duration::from_secs(6));
    let (stop, task) = run_until_stopped!(consumer);
    let rest = (others * per_key) as i64;
    // The deferred key's six and the poison key's five after its first.
    let waiting = 2 * per_key as i64 + 1;
    keys.rig
        .until(
            Duration::from_secs(30),
            "every other key's events are handled",
            || async { keys.count("k LIKE 'k%'").await >= rest },
        )
        .await;
    assert_eq!(
        keys.count("k IN ('poison', 'later')").await,
        0,
        "{}: the failing and the deferring keys wait behind their first messages",
        B::LABEL
    );
    keys.rig
        .until(
            Duration::from_secs(60),
            "the poison is dead-lettered and both keys' waiting events handled",
            || async {
                keys.count("k IN ('poison', 'later')").await >= waiting
                    && keys.rig.broker.dead_letters().await.len() == 1
            },
        )
        .await;
    let handled = keys
        .rig
        .stop_drained(stop, task, Duration::from_secs(30))
        .await;
    assert_eq!(keys.count("1 = 1").await, rest + waiting);
    assert_eq!(handled.dead_lettered, 1);
    // An SQS FIFO queue gives none of a group's later messages while its first is in flight:
    // the consumer has nothing to send back there.
    assert!(
        B::HOLDS_BACK_A_KEY || handled.held_back > 0,
        "the waiting keys' events were sent back to wait"
    );
    assert_eq!(
        keys.out_of_order("a.k LIKE 'k%'").await,
        0,
        "the other keys in order"
    );
    assert_eq!(
        keys.count("k = 'later' AND seq = 0").await,
        1,
        "the deferred message was handled"
    );
    let later_first = format!(
        "SELECT count(*) FROM {t} a JOIN {t} b ON a.k = b.k AND a.seq = 0 AND a.ran > b.ran WHERE a.k = 'later'",
        t = keys.table
    );
    assert_eq!(
        keys.rig.db.scalar(later_first).await,
        0,
        "the deferred message ran before the rest of its key"
    );
}
