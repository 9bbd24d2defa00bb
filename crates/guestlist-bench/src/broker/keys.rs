//! The keys figures of `guestlist-bench broker` (NATS and Kafka): a handler that waits on
//! another system, one batch at a time and with keys in parallel.
//!
//! The handler makes one call to a local HTTP service that answers after 10 ms (a real request,
//! its carried key in `Idempotency-Key`), then does the usual insert. `slow_sequential` runs it
//! through the consumer as it comes (concurrency 1: a batch at a time, its messages one after
//! another); `slow_parallel16` at concurrency 16, keyed by the event's order (1,000 keys). They
//! drain fewer events than the fast figures, the sequential one fewer again (it is about 100 a
//! second): 1,000 and 5,000 (300 and 1,500 with `--quick`), so that each runs long enough for
//! its start (the pool's and the HTTP client's first connections) not to count.

use std::sync::Arc;
use std::time::{Duration, Instant};

use guestlist::sqlx::{self, PgConnection, PgPool};
use guestlist::{HandlerName, Inbox};
use guestlist_consumer::{Consumer, IdFrom, KeyFrom, Message, Source};

use super::queues::{Queue, with_source};
use super::{EFFECTS, INBOX, PREFETCH, Tally, work};
use crate::Common;
use crate::measure::{Plan, median_of};
use crate::report::{Report, Row};

/// How long the service the slow handler calls takes to answer.
const CALL: Duration = Duration::from_millis(10);

/// The keys figures with the slow handler.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Slow {
    Sequential,
    Parallel(usize),
}

impl Slow {
    fn name(self) -> String {
        match self {
            Slow::Sequential => "slow_sequential".to_owned(),
            Slow::Parallel(n) => format!("slow_parallel{n}"),
        }
    }
}

/// Measures the slow figures on the broker whose queues `open` makes, into `report` under
/// `label`, and records `parallel16_slow_handler_vs_sequential_<broker>`.
pub(super) async fn measure_slow(
    broker: &str,
    open: impl AsyncFn(&str) -> anyhow::Result<Queue>,
    inbox: &Inbox<sqlx::Postgres>,
    common: &Common,
    label: &'static str,
    report: &mut Report,
) -> anyhow::Result<()> {
    let plan = Plan::of(common);
    // A connection for each lane, as the consumer's docs ask, and a few for the rest.
    let pool = &sqlx::postgres::PgPoolOptions::new()
        .max_connections(20)
        .connect(&common.database)
        .await?;
    let charge = serve_charges().await?;
    let client = reqwest::Client::new();
    let sequential = if common.quick { 300 } else { 1_000 };
    let figures = [Slow::Sequential, Slow::Parallel(16)];
    let mut samples: Vec<(Slow, f64)> = Vec::new();
    for round in 0..plan.rounds {
        for &figure in &plan.order(round, &figures) {
            let events = match figure {
                Slow::Sequential => sequential,
                Slow::Parallel(_) => 5 * sequential,
            };
            let queue = open(&format!("bench_{}_{round}", figure.name())).await?;
            for table in [EFFECTS, INBOX] {
                sqlx::query(sqlx::AssertSqlSafe(format!("TRUNCATE {table}")))
                    .execute(pool)
                    .await?;
            }
            queue.publish(events).await?;
            let source = queue.source(PREFETCH).await?;
            let started = Instant::now();
            let calls = (client.clone(), charge.clone());
            with_source!(source, |source| drain_slow(
                source, figure, pool, inbox, events, calls
            )
            .await)?;
            let rate = events as f64 / started.elapsed().as_secs_f64();
            let done: i64 = sqlx::query_scalar(sqlx::AssertSqlSafe(format!(
                "SELECT count(*) FROM {EFFECTS}"
            )))
            .fetch_one(pool)
            .await?;
            anyhow::ensure!(
                done as usize == events,
                "{broker} {}: {done} of {events} handled",
                figure.name()
            );
            eprintln!("  {:<15} round {round}  {rate:>9.0} msgs/s", figure.name());
            samples.push((figure, rate));
        }
    }
    for figure in figures {
        report.rows.push(Row {
            name: figure.name(),
            backend: label,
            workers: 1,
            batch: super::BATCH,
            per_sec: median_of(&samples, &figure),
            unit: "msgs/s",
            latency: None,
        });
    }
    let ratio = report.quotient("slow_parallel16", "slow_sequential", label, 1);
    report.record(
        &format!("parallel16_slow_handler_vs_sequential_{broker}"),
        ratio,
    );
    Ok(())
}

/// Consumes until `events` messages are handled by the slow handler, at the figure's
/// concurrency.
async fn drain_slow<S: Source>(
    source: S,
    figure: Slow,
    pool: &PgPool,
    inbox: &Inbox<sqlx::Postgres>,
    events: usize,
    (client, charge): (reqwest::Client, String),
) -> anyhow::Result<()> {
    let tally = Tally::of(events);
    let counted = Arc::clone(&tally);
    let consumer = Consumer::new(
        source,
        pool.clone(),
        inbox.clone(),
        HandlerName::new("warehouse")?,
        IdFrom::JsonField("/id".into()),
        async move |tx: &mut PgConnection, message: &Message| {
            let key = guestlist::carry::key_for("charge")?;
            client
                .post(&charge)
                .header("Idempotency-Key", key.as_str())
                .send()
                .await?
                .error_for_status()?;
            work(tx, message.id.as_str()).await?;
            counted.one_more();
            Ok::<_, anyhow::Error>(())
        },
    )
    .keys(KeyFrom::JsonField("/order".into()));
    let consumer = match figure {
        Slow::Sequential => consumer,
        Slow::Parallel(n) => consumer.concurrency(n),
    };
    consumer.run(tally.all_done()).await?;
    Ok(())
}

/// A local service that answers each charge after [`CALL`]; returns its URL.
async fn serve_charges() -> anyhow::Result<String> {
    let router = axum::Router::new().route(
        "/charges",
        axum::routing::post(async || {
            tokio::time::sleep(CALL).await;
            "charged"
        }),
    );
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
    let url = format!("http://{}/charges", listener.local_addr()?);
    tokio::spawn(async move { axum::serve(listener, router).await });
    Ok(url)
}
