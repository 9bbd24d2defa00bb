//! `guestlist-bench broker`: end-to-end messages per second on NATS JetStream, RabbitMQ, Kafka
//! and SQS, with PostgreSQL as the store, in one run (`GUESTLIST_BENCH_BROKERS=kafka,nats` picks
//! some of them).
//!
//! Each figure publishes the same events to a fresh stream or queue and times draining them:
//! - `baseline` fetches 100, does the work for each on one transaction, commits and acknowledges,
//!   with no inbox (a redelivery would do the work twice);
//! - `plain` is what a user writes without guestlist: the broker's client loop, one message at
//!   a time, its work on its own transaction, then a plain acknowledgement (no dedup);
//! - `default` runs guestlist's consumer with no settings;
//! - `batch1`, `batch10` and `batch100` run it at those batch limits;
//! - `inbox_only` does the consumer's claims and work in batches of 100 on one connection, with
//!   no broker: the database's limit for one consumer;
//! - `keys_default` and `keys16` run it with keys (the event's order, 1,000 of them) at the
//!   default concurrency and at 16: the price of keys in parallel where the handler is fast.
//!
//! NATS and Kafka then get the keys figures with a handler that waits 10 ms on another system
//! (see `keys`).
//!
//! SQS (a local server: moto) gets `baseline` (the SDK's receive, the work on one transaction,
//! commit, `DeleteMessageBatch`; no inbox), `batch10` (SQS receives ten at most) and
//! `broker_only` (receive and delete with no database: the server's floor), on fewer events,
//! fed from a task that keeps at most 50 waiting: moto scans a queue's every message on each
//! receive, so a queue loaded up front would measure moto's scan.
//!
//! The work is one INSERT per message. Then `default` is run again at 10 messages a second, for
//! the latency from publish to commit when traffic is thin.

mod keys;
mod latency;
mod plain;
mod publish;
pub(crate) mod queues;
mod sqs;

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use guestlist::sqlx::{self, PgConnection, PgPool};
use guestlist::{HandlerName, Inbox, MessageId};
use guestlist_consumer::{Consumer, Delivery, IdFrom, KeyFrom, Message, Source};
use tokio::sync::Notify;

use self::queues::{Queue, with_source};
use crate::Common;
use crate::measure::{Plan, median_of};
use crate::report::{Report, Row};

const EFFECTS: &str = "bench_broker_effects";
const INBOX: &str = "bench_broker_inbox";

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Figure {
    Baseline,
    Plain,
    InboxOnly,
    Default,
    Batch(usize),
    BrokerOnly,
    /// Keyed by the event's order, at this concurrency (the default where `None`).
    Keys(Option<usize>),
}

impl Figure {
    const ALL: [Figure; 9] = [
        Figure::Baseline,
        Figure::Plain,
        Figure::InboxOnly,
        Figure::Default,
        Figure::Batch(1),
        Figure::Batch(10),
        Figure::Batch(100),
        Figure::Keys(None),
        Figure::Keys(Some(16)),
    ];
    /// SQS's figures.
    const SQS: [Figure; 3] = [Figure::Baseline, Figure::Batch(10), Figure::BrokerOnly];

    fn name(self) -> String {
        match self {
            Figure::Baseline => "baseline".to_owned(),
            Figure::Plain => "plain".to_owned(),
            Figure::InboxOnly => "inbox_only".to_owned(),
            Figure::Default => "default".to_owned(),
            Figure::Batch(n) => format!("batch{n}"),
            Figure::BrokerOnly => "broker_only".to_owned(),
            Figure::Keys(None) => "keys_default".to_owned(),
            Figure::Keys(Some(n)) => format!("keys{n}"),
        }
    }

    fn batch(self) -> usize {
        match self {
            Figure::Plain | Figure::Batch(1) => 1,
            Figure::Batch(n) => n,
            Figure::BrokerOnly => 10,
            Figure::Baseline | Figure::InboxOnly | Figure::Default | Figure::Keys(_) => 100,
        }
    }
}

/// The batch of the `inbox_only` figure, and the prefetch window every consumer's source gets
/// (two batches, so that the next one arrives while one commits).
const BATCH: usize = 100;
const PREFETCH: u16 = 200;
/// The most SQS messages waiting while a figure is measured: the feeder keeps the queue this
/// short (see `Queue::feed_sqs`).
const SQS_DEPTH: u64 = 50;

pub(crate) async fn run(common: &Common) -> anyhow::Result<Report> {
    anyhow::ensure!(
        common.database.starts_with("postgres"),
        "the broker bench keeps its inbox in PostgreSQL: pass --database postgres://…"
    );
    let plan = Plan::of(common);
    let events = if common.quick { 2_000 } else { 10_000 };
    let pool = sqlx::postgres::PgPoolOptions::new()
        .max_connections(8)
        .connect(&common.database)
        .await?;
    for statement in [
        format!("DROP TABLE IF EXISTS {EFFECTS}"),
        format!("CREATE TABLE {EFFECTS} (event TEXT NOT NULL)"),
        format!("DROP TABLE IF EXISTS {INBOX}"),
    ] {
        sqlx::query(sqlx::AssertSqlSafe(statement))
            .execute(&pool)
            .await?;
    }
    let inbox = Inbox::<sqlx::Postgres>::with_table(INBOX)?;
    inbox.migrate(&pool).await?;

    let (nats_url, amqp_url, kafka, sqs_endpoint) = (
        queues::nats_url(),
        queues::amqp_url(),
        queues::kafka_brokers(),
        queues::sqs_endpoint(),
    );
    let brokers = std::env::var("GUESTLIST_BENCH_BROKERS")
        .unwrap_or_else(|_| "nats,rabbitmq,kafka,sqs".to_owned());
    let mut report = Report::default();
    for broker in brokers.split(',').map(str::trim) {
        anyhow::ensure!(
            matches!(broker, "nats" | "rabbitmq" | "kafka" | "sqs"),
            "GUESTLIST_BENCH_BROKERS names {broker}: give nats, rabbitmq, kafka or sqs"
        );
        eprintln!("measuring {broker} …");
        let (figures, events): (&[Figure], usize) = match broker {
            "sqs" => (&Figure::SQS, if common.quick { 500 } else { 2_000 }),
            _ => (&Figure::ALL, events),
        };
        let mut samples: Vec<(Figure, f64)> = Vec::new();
        for round in 0..plan.rounds {
            for &figure in &plan.order(round, figures) {
                let name = format!("bench_{}_{round}", figure.name());
                let queue = match broker {
                    "nats" => Queue::nats(&nats_url, &name).await?,
                    "kafka" => Queue::kafka(&kafka, &name).await?,
                    "sqs" => Queue::sqs(&sqs_endpoint, &name).await?,
                    _ => Queue::rabbit(&amqp_url, &name).await?,
                };
                for table in [EFFECTS, INBOX] {
                    sqlx::query(sqlx::AssertSqlSafe(format!("TRUNCATE {table}")))
                        .execute(&pool)
                        .await?;
                }
                let started = match figure {
                    _ if broker == "sqs" => {
                        let source = match figure {
                            Figure::Batch(_) => Some(queue.source(PREFETCH).await?),
                            _ => None,
                        };
                        let started = Instant::now();
                        let fed = queue.feed_sqs(events, SQS_DEPTH)?;
                        match source {
                            Some(source) => with_source!(source, |source| drain(
                                source, figure, &pool, &inbox, events
                            )
                            .await)?,
                            None => {
                                let pool = (figure == Figure::Baseline).then_some(&pool);
                                sqs::drain(&queue, pool, events).await?
                            }
                        }
                        fed.await??;
                        started
                    }
                    Figure::InboxOnly => {
                        let started = Instant::now();
                        inbox_only(&pool, &inbox, events).await?;
                        started
                    }
                    Figure::Plain => {
                        queue.publish(events).await?;
                        let mut started = Instant::now();
                        plain::drain(&queue, &pool, events, &mut started).await?;
                        started
                    }
                    _ => {
                        queue.publish(events).await?;
                        let source = queue.source(PREFETCH).await?;
                        let started = Instant::now();
                        with_source!(source, |source| drain(
                            source, figure, &pool, &inbox, events
                        )
                        .await)?;
                        started
                    }
                };
                let rate = events as f64 / started.elapsed().as_secs_f64();
                // broker_only writes nothing: its loop counted the deletes.
                let expected = if figure == Figure::BrokerOnly {
                    0
                } else {
                    events
                };
                let done: i64 = sqlx::query_scalar(sqlx::AssertSqlSafe(format!(
                    "SELECT count(*) FROM {EFFECTS}"
                )))
                .fetch_one(&pool)
                .await?;
                anyhow::ensure!(
                    done as usize == expected,
                    "{broker} {}: {done} of {expected} handled",
                    figure.name()
                );
                eprintln!("  {:<9} round {round}  {rate:>9.0} msgs/s", figure.name());
                samples.push((figure, rate));
            }
        }
        let label = match broker {
            "nats" => "nats_postgres",
            "kafka" => "kafka_postgres",
            "sqs" => "sqs_postgres",
            _ => "rabbitmq_postgres",
        };
        for &figure in figures {
            report.rows.push(Row {
                name: figure.name(),
                backend: label,
                workers: 1,
                // SQS receives ten at most, whatever the batch asked.
                batch: if broker == "sqs" {
                    figure.batch().min(10)
                } else {
                    figure.batch()
                },
                per_sec: median_of(&samples, &figure),
                unit: "msgs/s",
                latency: None,
            });
        }
        if broker == "sqs" {
            report.ratio("batch10_vs_baseline", "batch10", "baseline", label, 1);
            report.ratio("batch10_vs_broker_only", "batch10", "broker_only", label, 1);
            report.ratio(
                "baseline_vs_broker_only",
                "baseline",
                "broker_only",
                label,
                1,
            );
        }
        for n in [1, 10, 100].into_iter().filter(|_| broker != "sqs") {
            let batch = format!("batch{n}");
            report.ratio(
                &format!("{batch}_vs_baseline"),
                &batch,
                "baseline",
                label,
                1,
            );
        }
        if broker != "sqs" {
            report.ratio("batch100_vs_inbox_only", "batch100", "inbox_only", label, 1);
            report.ratio("default_vs_batch100", "default", "batch100", label, 1);
            report.ratio("default_vs_plain", "default", "plain", label, 1);
            report.ratio("keys16_vs_batch100", "keys16", "batch100", label, 1);
            let keyed = report.quotient("keys_default", "batch100", label, 1);
            report.record(
                &format!("parallel_default_fast_handler_vs_batch_{broker}"),
                keyed,
            );
        }
        if matches!(broker, "nats" | "kafka") {
            eprintln!("measuring {broker} with a handler that waits 10 ms …");
            let open = async |name: &str| match broker {
                "nats" => Queue::nats(&nats_url, name).await,
                _ => Queue::kafka(&kafka, name).await,
            };
            keys::measure_slow(broker, open, &inbox, common, label, &mut report).await?;
        }

        // Thin traffic: the default consumer must not wait for a batch to fill.
        let queue = match broker {
            "nats" => Queue::nats(&nats_url, "bench_latency").await?,
            "kafka" => Queue::kafka(&kafka, "bench_latency").await?,
            "sqs" => Queue::sqs(&sqs_endpoint, "bench_latency").await?,
            _ => Queue::rabbit(&amqp_url, "bench_latency").await?,
        };
        for table in [EFFECTS, INBOX] {
            sqlx::query(sqlx::AssertSqlSafe(format!("TRUNCATE {table}")))
                .execute(&pool)
                .await?;
        }
        let count = if common.quick { 50 } else { 200 };
        let latency = latency::measure(&queue, &pool, &inbox, count, 10).await?;
        eprintln!(
            "  default at 10 msgs/s: p50 {:.1} ms, p99 {:.1} ms",
            latency.p50_ms, latency.p99_ms
        );
        report.rows.push(Row {
            name: "default_10_per_sec".to_owned(),
            backend: label,
            workers: 1,
            batch: BATCH,
            per_sec: 10.0,
            unit: "msgs/s",
            latency: Some(latency),
        });
    }
    Ok(report)
}

/// Consumes until `events` messages are handled.
async fn drain<S: Source>(
    source: S,
    figure: Figure,
    pool: &PgPool,
    inbox: &Inbox<sqlx::Postgres>,
    events: usize,
) -> anyhow::Result<()> {
    match figure {
        Figure::Baseline => baseline(source, pool, events).await,
        Figure::Plain | Figure::InboxOnly | Figure::BrokerOnly => {
            unreachable!("{figure:?} runs without a source")
        }
        Figure::Default | Figure::Batch(_) | Figure::Keys(_) => {
            let tally = Tally::of(events);
            let counted = Arc::clone(&tally);
            let consumer = Consumer::new(
                source,
                pool.clone(),
                inbox.clone(),
                HandlerName::new("warehouse")?,
                IdFrom::JsonField("/id".into()),
                async move |tx: &mut PgConnection, message: &Message| {
                    work(tx, message.id.as_str()).await?;
                    counted.one_more();
                    Ok::<_, sqlx::Error>(())
                },
            );
            // `default` keeps every setting as it comes.
            let consumer = match figure {
                Figure::Batch(n) => consumer.batch_size(n),
                Figure::Keys(concurrency) => {
                    let keyed = consumer.keys(KeyFrom::JsonField("/order".into()));
                    match concurrency {
                        Some(n) => keyed.concurrency(n),
                        None => keyed,
                    }
                }
                _ => consumer,
            };
            consumer.run(tally.all_done()).await?;
            Ok(())
        }
    }
}

/// How many messages a figure's handler has handled, and the moment the last one of a figure's
/// events is.
pub(super) struct Tally {
    handled: AtomicU64,
    events: u64,
    all_done: Notify,
}

impl Tally {
    /// A tally of `events` messages to handle.
    pub(super) fn of(events: usize) -> Arc<Self> {
        Arc::new(Self {
            handled: AtomicU64::new(0),
            events: events as u64,
            all_done: Notify::new(),
        })
    }

    /// One more message handled.
    pub(super) fn one_more(&self) {
        if self.handled.fetch_add(1, Ordering::SeqCst) + 1 >= self.events {
            self.all_done.notify_one();
        }
    }

    /// Completes once every event is handled: a consumer's shutdown.
    pub(super) async fn all_done(self: Arc<Self>) {
        self.all_done.notified().await;
    }
}

/// `inbox_only`: the consumer's claims and work in batches of [`BATCH`] on one connection, with
/// no broker.
async fn inbox_only(
    pool: &PgPool,
    inbox: &Inbox<sqlx::Postgres>,
    events: usize,
) -> anyhow::Result<()> {
    let handler = HandlerName::new("warehouse")?;
    let ids: Vec<MessageId> = (0..events)
        .map(|n| MessageId::new(format!("evt_{n}")))
        .collect::<Result<_, _>>()?;
    for batch in ids.chunks(BATCH) {
        let mut tx = inbox.begin(pool).await?;
        let fresh = inbox.claim_batch(&mut tx, &handler, batch).await?;
        for id in &fresh {
            work(&mut tx, id.as_str()).await?;
        }
        tx.commit().await?;
    }
    Ok(())
}

/// The work every figure does for a message.
pub(super) async fn work(tx: &mut PgConnection, event: &str) -> Result<(), sqlx::Error> {
    sqlx::query("INSERT INTO bench_broker_effects (event) VALUES ($1)")
        .bind(event)
        .execute(tx)
        .await
        .map(drop)
}

/// The baseline: a batch of 100, the work on one transaction, commit, acknowledge. No claims.
async fn baseline<S: Source>(mut source: S, pool: &PgPool, events: usize) -> anyhow::Result<()> {
    let mut done = 0;
    while done < events {
        let batch = source.fetch(100).await.map_err(|e| anyhow::anyhow!(e))?;
        if batch.is_empty() {
            tokio::time::sleep(Duration::from_millis(1)).await;
            continue;
        }
        let mut tx = pool.begin().await?;
        for delivery in &batch {
            let event: serde_json::Value = serde_json::from_slice(delivery.payload())?;
            work(&mut tx, event["id"].as_str().unwrap_or_default()).await?;
        }
        tx.commit().await?;
        for delivery in &batch {
            delivery.ack().await.map_err(|e| anyhow::anyhow!(e))?;
        }
        done += batch.len();
    }
    Ok(())
}
