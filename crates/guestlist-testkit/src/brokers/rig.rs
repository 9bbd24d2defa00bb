//! The suite's rig: one test's broker queue, inbox and effects table, and the handler that
//! counts effects in them.

use std::collections::{HashMap, HashSet};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use crate::{Database, Fixture, short_tag};
use guestlist_consumer::{Consumer, Handled, Handler, IdFrom, Message};
use guestlist_core::{Deferral, HandlerName};
use guestlist_sqlx::Inbox;
use tokio::sync::Notify;

use crate::brokers::Broker;

/// The suite's handler: one effect row per fresh event, with the key a charge would carry; "not
/// yet" for the first deliveries of an event that asks for it (or, kept in the handler's own
/// state, for its first run only), and a failure for poison.
pub struct Pick {
    effects: Arc<str>,
    started: Arc<Notify>,
    /// Runs of the handler on a poison event, failed each.
    poison_runs: Arc<AtomicU64>,
    /// Events that said "not yet" once already, by id.
    deferred_once: Arc<Mutex<HashSet<String>>>,
    /// The headers of each message the handler ran on, by id.
    headers_seen: HeadersSeen,
    /// Whether a curable poison event's cause is fixed: it then runs as any event.
    cured: Arc<AtomicBool>,
}

/// The headers of each message a handler ran on, by id.
type HeadersSeen = Arc<Mutex<HashMap<String, Vec<(String, String)>>>>;

impl<DB: Fixture> Handler<DB> for Pick {
    type Error = anyhow::Error;

    async fn handle(&self, tx: &mut DB::Connection, message: &Message) -> anyhow::Result<()> {
        self.started.notify_one();
        self.headers_seen
            .lock()
            .unwrap()
            .insert(message.id.to_string(), message.headers.clone());
        let event: serde_json::Value = serde_json::from_slice(&message.payload)?;
        // "Not yet" (a downstream has the work in flight) for the first deliveries.
        if let Some(until) = event["not_yet_until"].as_u64()
            && u64::from(message.delivery_count) <= until
        {
            let not_yet = Deferral::new(Duration::from_millis(50), "payments has it in flight");
            return Err(guestlist_carry::defer(not_yet).into());
        }
        // "Not yet" once, remembered by the handler itself, not by the delivery count.
        if event["defer_once"] == true
            && self
                .deferred_once
                .lock()
                .unwrap()
                .insert(message.id.to_string())
        {
            let not_yet = Deferral::new(Duration::from_millis(200), "stock is being counted");
            return Err(guestlist_carry::defer(not_yet).into());
        }
        let cured = event["curable"] == true && self.cured.load(Ordering::SeqCst);
        if event["kind"] == "poison" && !cured {
            self.poison_runs.fetch_add(1, Ordering::SeqCst);
            anyhow::bail!("poison pill: the order has no lines");
        }
        if let Some(ms) = event["slow_ms"].as_u64() {
            tokio::time::sleep(Duration::from_millis(ms)).await;
        }
        // The key a charge would carry downstream, derived from this message.
        let carried = guestlist_carry::key_for("charge")?;
        // The suite's ids are evt_<digits>, safe to write into the SQL text.
        let insert = format!(
            "INSERT INTO {} (event, delivery, carried) VALUES ('{}', {}, '{carried}')",
            self.effects, message.id, message.delivery_count
        );
        DB::exec(tx, insert).await?;
        Ok(())
    }
}

/// One test's broker queue, inbox and effects table, on the database `DB`.
pub struct Rig<B: Broker, DB: Fixture> {
    /// The test's queue (stream) on the broker.
    pub broker: B,
    /// The database the inbox and the effects live in.
    pub db: Database<DB>,
    /// The test's own inbox table.
    pub inbox: Inbox<DB>,
    /// The table the pick handler writes one row per run into.
    pub effects: Arc<str>,
    /// The short tag the test's queue and tables are named after.
    pub tag: String,
    /// Runs of the handler on poison events, failed each.
    pub poison_runs: Arc<AtomicU64>,
    deferred_once: Arc<Mutex<HashSet<String>>>,
    pub(crate) headers_seen: HeadersSeen,
    /// Set: the poison events marked `"curable": true` run as any event from then on (the
    /// bug that made them fail is fixed).
    pub cured: Arc<AtomicBool>,
}

impl<B: Broker, DB: Fixture> Rig<B, DB> {
    /// A fresh queue, inbox and effects table for the test `name`; `ack_wait` where the broker
    /// has one.
    pub async fn open(name: &str, ack_wait: Duration) -> Self {
        Self::open_on(B::open(&short_tag(name), ack_wait).await, name).await
    }

    /// [`Rig::open`] around a broker queue made for the test `name` already.
    pub async fn open_on(broker: B, name: &str) -> Self {
        Self::open_with(broker, Database::open(16).await, name).await
    }

    /// [`Rig::open`] on the database at `url` (a server of the test's own).
    pub async fn open_at(name: &str, ack_wait: Duration, url: &str) -> Self {
        let broker = B::open(&short_tag(name), ack_wait).await;
        Self::open_with(broker, Database::attach(url, 16).await, name).await
    }

    async fn open_with(broker: B, db: Database<DB>, name: &str) -> Self {
        let tag = short_tag(name);
        let rig = Self::around(broker, db, &tag);
        let inbox = rig.inbox.table().to_string();
        let tables = [
            format!("{inbox}_dead"),
            format!("{inbox}_steps"),
            inbox,
            rig.effects.to_string(),
        ];
        for table in tables {
            rig.db.exec(format!("DROP TABLE IF EXISTS {table}")).await;
        }
        rig.inbox.migrate(&rig.db.pool).await.unwrap();
        rig.db
            .exec(format!(
                "CREATE TABLE {} (event TEXT NOT NULL, delivery INT NOT NULL, carried TEXT NOT NULL)",
                rig.effects
            ))
            .await;
        rig
    }

    pub(crate) fn around(broker: B, db: Database<DB>, tag: &str) -> Self {
        Self {
            broker,
            inbox: Inbox::with_table(&format!("gl_{tag}")).unwrap(),
            effects: Arc::from(format!("effects_{tag}")),
            db,
            tag: tag.to_owned(),
            poison_runs: Arc::default(),
            deferred_once: Arc::default(),
            headers_seen: Arc::default(),
            cured: Arc::default(),
        }
    }

    /// The rig of test `tag` on the database at `url`, from a child process.
    pub async fn attach(tag: &str, url: &str, ack_wait: Duration) -> Self {
        Self::around(
            B::attach(tag, ack_wait).await,
            Database::attach(url, 16).await,
            tag,
        )
    }

    /// A consumer of the queue with the pick handler, `batch` messages at a time.
    pub async fn consumer(&self, batch: usize) -> Consumer<B::Source, DB, Pick> {
        self.consumer_signalling(batch, Arc::new(Notify::new()))
            .await
    }

    /// A consumer of `source` with the pick handler, `batch` messages at a time.
    pub fn consumer_of<S: guestlist_consumer::Source>(
        &self,
        source: S,
        batch: usize,
    ) -> Consumer<S, DB, Pick> {
        self.consumer_of_signalling(source, batch, Arc::new(Notify::new()))
    }

    /// [`Rig::consumer_of`], taking each message's id by `id_from`.
    pub fn consumer_by<S: guestlist_consumer::Source>(
        &self,
        source: S,
        batch: usize,
        id_from: IdFrom,
    ) -> Consumer<S, DB, Pick> {
        self.consumer_with(source, batch, id_from, Arc::new(Notify::new()))
    }

    /// [`Rig::consumer`], notifying `started` whenever a handler starts.
    pub async fn consumer_signalling(
        &self,
        batch: usize,
        started: Arc<Notify>,
    ) -> Consumer<B::Source, DB, Pick> {
        self.consumer_of_signalling(self.broker.source().await, batch, started)
    }

    fn consumer_of_signalling<S: guestlist_consumer::Source>(
        &self,
        source: S,
        batch: usize,
        started: Arc<Notify>,
    ) -> Consumer<S, DB, Pick> {
        self.consumer_with(source, batch, IdFrom::JsonField("/id".to_owned()), started)
    }

    fn consumer_with<S: guestlist_consumer::Source>(
        &self,
        source: S,
        batch: usize,
        id_from: IdFrom,
        started: Arc<Notify>,
    ) -> Consumer<S, DB, Pick> {
        self.consumer_from(
            source,
            self.db.pool.clone(),
            self.inbox.clone(),
            batch,
            id_from,
            started,
        )
    }

    /// A consumer of the queue with the pick handler on `pool` and `inbox`, 10 messages at a
    /// time.
    pub async fn consumer_on(
        &self,
        pool: sqlx::Pool<DB>,
        inbox: Inbox<DB>,
    ) -> Consumer<B::Source, DB, Pick> {
        let source = self.broker.source().await;
        let id_from = IdFrom::JsonField("/id".to_owned());
        self.consumer_from(source, pool, inbox, 10, id_from, Arc::new(Notify::new()))
    }

    /// A consumer of `source` with the pick handler on `pool` and `inbox`.
    fn consumer_from<S: guestlist_consumer::Source>(
        &self,
        source: S,
        pool: sqlx::Pool<DB>,
        inbox: Inbox<DB>,
        batch: usize,
        id_from: IdFrom,
        started: Arc<Notify>,
    ) -> Consumer<S, DB, Pick> {
        Consumer::with_handler(
            source,
            pool,
            inbox,
            HandlerName::new("warehouse").unwrap(),
            id_from,
            Pick {
                effects: self.effects.clone(),
                started,
                poison_runs: self.poison_runs.clone(),
                deferred_once: self.deferred_once.clone(),
                headers_seen: self.headers_seen.clone(),
                cured: self.cured.clone(),
            },
        )
        .batch_size(batch)
        .backoff(Duration::from_millis(50), Duration::from_millis(200))
    }

    /// (pick tasks, distinct events among them).
    pub async fn effects(&self) -> (i64, i64) {
        let all = self
            .db
            .scalar(format!("SELECT count(*) FROM {}", self.effects))
            .await;
        let distinct = self
            .db
            .scalar(format!(
                "SELECT count(DISTINCT event) FROM {}",
                self.effects
            ))
            .await;
        (all, distinct)
    }

    /// Waits (at most `limit`) until nothing is outstanding on the broker, then stops the
    /// consumer that `stop` and `task` run ([`run_until_stopped!`](crate::run_until_stopped)) and
    /// returns what it handled, failing the test if its run failed.
    pub async fn stop_drained<E: std::fmt::Debug>(
        &self,
        stop: tokio::sync::oneshot::Sender<()>,
        task: tokio::task::JoinHandle<Result<Handled, E>>,
        limit: Duration,
    ) -> Handled {
        self.until(limit, "nothing is outstanding", || self.broker.drained())
            .await;
        stop.send(()).unwrap();
        task.await.unwrap().unwrap()
    }

    /// Waits (at most `limit`) until `done` holds.
    pub async fn until<F, Fut>(&self, limit: Duration, what: &str, done: F)
    where
        F: Fn() -> Fut,
        Fut: std::future::Future<Output = bool>,
    {
        let deadline = Instant::now() + limit;
        while !done().await {
            assert!(
                Instant::now() < deadline,
                "{}: gave up waiting until {what}",
                B::LABEL
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }
}

/// An OrderPaid event.
pub fn order_paid(id: &str) -> Vec<u8> {
    format!(r#"{{"id":"{id}","type":"OrderPaid","order":42}}"#).into_bytes()
}
