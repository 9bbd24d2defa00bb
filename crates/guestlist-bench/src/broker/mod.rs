//! `guestlist-bench broker`: end-to-end messages per second on NATS JetStream and RabbitMQ, with
//! PostgreSQL as the store, in one run.
//!
//! Each figure publishes the same events to a fresh stream or queue and times draining them:
//! `baseline` fetches 100, does the work for each on one transaction, commits and acknowledges,
//! with no inbox (a redelivery would do the work twice); `batch1`, `batch10` and `batch100` run
//! guestlist's consumer, which also claims every id, at those batch sizes. The work is one INSERT
//! per message.

mod queues;

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use guestlist::sqlx::{self, PgConnection, PgPool};
use guestlist::{HandlerName, Inbox};
use guestlist_consumer::{Consumer, Delivery, IdFrom, Message, Source};
use tokio::sync::Notify;

use self::queues::{Queue, with_source};
use crate::Common;
use crate::measure::{Plan, median};
use crate::report::{Report, Row};

const EFFECTS: &str = "bench_broker_effects";
const INBOX: &str = "bench_broker_inbox";

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Figure {
    Baseline,
    Batch(usize),
}

impl Figure {
    const ALL: [Figure; 4] = [
        Figure::Baseline,
        Figure::Batch(1),
        Figure::Batch(10),
        Figure::Batch(100),
    ];

    fn name(self) -> String {
        match self {
            Figure::Baseline => "baseline".to_owned(),
            Figure::Batch(n) => format!("batch{n}"),
        }
    }

    fn batch(self) -> usize {
        match self {
            Figure::Baseline => 100,
            Figure::Batch(n) => n,
        }
    }
}

pub(crate) async fn run(common: &Common) -> anyhow::Result<Report> {
    anyhow::ensure!(
        common.database.starts_with("postgres"),
        "the broker bench keeps its inbox in PostgreSQL: pass --database postgres://…"
    );
    let plan = Plan::new(common.quick);
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

    let nats_url = std::env::var("GUESTLIST_BENCH_NATS_URL")
        .unwrap_or_else(|_| "nats://127.0.0.1:4222".into());
    let amqp_url = std::env::var("GUESTLIST_BENCH_AMQP_URL")
        .unwrap_or_else(|_| "amqp://guest:guest@127.0.0.1:5672/%2f".into());
    let mut report = Report::default();
    for broker in ["nats", "rabbitmq"] {
        eprintln!("measuring {broker} …");
        let mut samples: Vec<(Figure, f64)> = Vec::new();
        for round in 0..plan.rounds {
            for figure in plan.order(round, &Figure::ALL) {
                let name = format!("bench_{}_{round}", figure.name());
                let queue = match broker {
                    "nats" => Queue::nats(&nats_url, &name).await?,
                    _ => Queue::rabbit(&amqp_url, &name).await?,
                };
                for table in [EFFECTS, INBOX] {
                    sqlx::query(sqlx::AssertSqlSafe(format!("TRUNCATE {table}")))
                        .execute(&pool)
                        .await?;
                }
                queue.publish(events).await?;
                let source = queue.source(100).await?;
                let started = Instant::now();
                with_source!(source, |source| drain(
                    source, figure, &pool, &inbox, events
                )
                .await)?;
                let rate = events as f64 / started.elapsed().as_secs_f64();
                let done: i64 = sqlx::query_scalar(sqlx::AssertSqlSafe(format!(
                    "SELECT count(*) FROM {EFFECTS}"
                )))
                .fetch_one(&pool)
                .await?;
                anyhow::ensure!(
                    done as usize == events,
                    "{broker} {}: {done} of {events} handled",
                    figure.name()
                );
                eprintln!("  {:<9} round {round}  {rate:>9.0} msgs/s", figure.name());
                samples.push((figure, rate));
            }
        }
        let label = if broker == "nats" {
            "nats_postgres"
        } else {
            "rabbitmq_postgres"
        };
        for figure in Figure::ALL {
            let rates = samples
                .iter()
                .filter(|(f, _)| *f == figure)
                .map(|(_, r)| *r)
                .collect();
            report.rows.push(Row {
                name: figure.name(),
                backend: label,
                workers: 1,
                batch: figure.batch(),
                per_sec: median(rates),
                unit: "msgs/s",
                latency: None,
            });
        }
        let baseline = report.get("baseline", label, 1);
        for n in [1, 10, 100] {
            let guestlist = report.get(&format!("batch{n}"), label, 1);
            report.ratios.insert(
                format!("batch{n}_vs_baseline_{label}"),
                guestlist / baseline,
            );
        }
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
        Figure::Batch(n) => {
            let handled = Arc::new(AtomicU64::new(0));
            let all_done = Arc::new(Notify::new());
            let counter = (handled.clone(), all_done.clone());
            let consumer = Consumer::new(
                source,
                pool.clone(),
                inbox.clone(),
                HandlerName::new("warehouse")?,
                IdFrom::JsonField("/id".into()),
                async move |tx: &mut PgConnection, message: &Message| {
                    let (handled, all_done) = &counter;
                    work(tx, message.id.as_str()).await?;
                    if handled.fetch_add(1, Ordering::SeqCst) + 1 >= events as u64 {
                        all_done.notify_one();
                    }
                    Ok::<_, sqlx::Error>(())
                },
            )
            .batch_size(n);
            consumer
                .run(async move { all_done.notified().await })
                .await?;
            Ok(())
        }
    }
}

/// The work every figure does for a message.
async fn work(tx: &mut PgConnection, event: &str) -> Result<(), sqlx::Error> {
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
