//! `guestlist-bench outbox`: committed outbox rows to broker-confirmed messages, on NATS
//! JetStream and RabbitMQ with PostgreSQL, in one run.
//!
//! Each figure moves the same messages to a fresh stream or queue:
//! - `publish_only` publishes them straight with the broker client (the same messages: id,
//!   ordering key and place, payload), batches of 500 pipelined and confirmed together, with no
//!   database: the broker's limit;
//! - `relay` drains an outbox table preloaded with them (committed, 100 ordering keys) with
//!   guestlist's relay, defaults kept: read a batch, publish, confirm, stamp (the stamp
//!   deletes the confirmed rows);
//! - `relay_keep_published` is the same relay keeping the rows it publishes
//!   (`Relay::keep_published`): its stamp sets `published_at`, a second row version each;
//! - `handwritten` is the polling relay written the obvious way: SELECT 100 unpublished rows,
//!   publish each and wait for its confirmation, UPDATE each;
//! - `database_part_by_hand` is the database's share of relaying, by hand and with no broker:
//!   read the oldest 500 pending rows, delete them, commit, until none is left. Publishing's CPU
//!   plus this one's is the floor of the relay's (`relay_cpu_floor_vs_publish_only`).
//!
//! Then the relay runs on its own while messages commit at 100 a second, for the latency from
//! a commit to the message's arrival at a subscriber; then the price of its per-key order (see
//! `order`); and last, relays side by side (see `scale`): four against one on a broker 5 ms
//! away, two against one at hand.

mod by_hand;
mod latency;
mod order;
mod scale;

use std::time::Instant;

use guestlist::sqlx::{self, PgPool};
use guestlist::{
    Outbox, Relay,
    outbox::{OutboxMessage, Outcomes, Publish},
};
use guestlist_amqp::RabbitPublisher;
use guestlist_nats::JetStreamPublisher;

use crate::Common;
use crate::broker::queues::{self, Queue};
use crate::cpu::CpuClock;
use crate::measure::{Plan, median};
use crate::report::{Report, Row};

/// The outbox table the bench fills and drains.
const TABLE: &str = "bench_outbox";

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Figure {
    PublishOnly,
    Relay,
    RelayKeepPublished,
    Handwritten,
    DatabasePartByHand,
}

impl Figure {
    const ALL: [Figure; 5] = [
        Figure::DatabasePartByHand,
        Figure::PublishOnly,
        Figure::Relay,
        Figure::RelayKeepPublished,
        Figure::Handwritten,
    ];

    fn name(self) -> &'static str {
        match self {
            Figure::PublishOnly => "publish_only",
            Figure::Relay => "relay",
            Figure::RelayKeepPublished => "relay_keep_published",
            Figure::Handwritten => "handwritten",
            Figure::DatabasePartByHand => "database_part_by_hand",
        }
    }

    fn batch(self) -> usize {
        match self {
            Figure::PublishOnly | Figure::DatabasePartByHand => PUBLISH_BATCH,
            Figure::Relay | Figure::RelayKeepPublished => {
                Relay::<sqlx::Postgres, JetStreamPublisher>::DEFAULT_BATCH
            }
            Figure::Handwritten => HANDWRITTEN_BATCH,
        }
    }
}

const PUBLISH_BATCH: usize = 500;
const HANDWRITTEN_BATCH: usize = 100;

pub(crate) async fn run(common: &Common) -> anyhow::Result<Report> {
    anyhow::ensure!(
        common.database.starts_with("postgres"),
        "the outbox bench measures the relay on PostgreSQL: pass --database postgres://…"
    );
    let plan = Plan::of(common);
    // Enough for the fast figures to run for a second or so; the hand-written relay waits for
    // each confirmation and each UPDATE, so it gets fewer (its rate does not depend on them).
    let messages = if common.quick { 30_000 } else { 100_000 };
    let handwritten_messages = if common.quick { 2_000 } else { 5_000 };
    let pool = sqlx::postgres::PgPoolOptions::new()
        .max_connections(8)
        .connect(&common.database)
        .await?;
    let outbox = Outbox::<sqlx::Postgres>::with_table(TABLE)?;
    for table in [
        format!("{TABLE}_keys"),
        format!("{TABLE}_relay"),
        format!("{TABLE}_relays"),
        TABLE.into(),
    ] {
        sqlx::query(sqlx::AssertSqlSafe(format!("DROP TABLE IF EXISTS {table}")))
            .execute(&pool)
            .await?;
    }
    outbox.migrate(&pool).await?;

    let (nats_url, amqp_url) = (queues::nats_url(), queues::amqp_url());
    let mut report = Report::default();
    for broker in ["nats", "rabbitmq"] {
        eprintln!("measuring the relay to {broker} …");
        let label = if broker == "nats" {
            "nats_postgres"
        } else {
            "rabbitmq_postgres"
        };
        // A thin stream first, on a quiet machine: measured after the throughput figures, it
        // would time the broker's and the database's flushes of their hundreds of thousands of
        // writes instead.
        let queue = match broker {
            "nats" => Queue::nats(&nats_url, "bench_outbox_latency").await?,
            _ => Queue::rabbit(&amqp_url, "bench_outbox_latency").await?,
        };
        let count = if common.quick { 100 } else { 500 };
        let latency = match broker {
            "nats" => {
                let publisher = JetStreamPublisher::builder(&nats_url).connect().await?;
                latency::measure(&pool, &outbox, publisher, &queue, count, 100).await?
            }
            _ => {
                let publisher = RabbitPublisher::builder(&amqp_url).connect().await?;
                latency::measure(&pool, &outbox, publisher, &queue, count, 100).await?
            }
        };
        queue.remove().await?;
        eprintln!(
            "  relay at 100 msgs/s, commit to subscriber: p50 {:.1} ms, p99 {:.1} ms",
            latency.p50_ms, latency.p99_ms
        );
        let mut samples: Vec<(Figure, f64, Option<f64>)> = Vec::new();
        for round in 0..plan.rounds {
            for figure in plan.order(round, &Figure::ALL) {
                let name = format!("bench_outbox_{}_{round}", figure.name());
                let queue = match broker {
                    "nats" => Queue::nats(&nats_url, &name).await?,
                    _ => Queue::rabbit(&amqp_url, &name).await?,
                };
                let messages = match figure {
                    Figure::Handwritten => handwritten_messages,
                    _ => messages,
                };
                let (rate, cpu) = match broker {
                    "nats" => {
                        let publisher = JetStreamPublisher::builder(&nats_url).connect().await?;
                        measure(figure, &pool, &outbox, publisher, &queue, messages).await?
                    }
                    _ => {
                        let publisher = RabbitPublisher::builder(&amqp_url).connect().await?;
                        measure(figure, &pool, &outbox, publisher, &queue, messages).await?
                    }
                };
                queue.remove().await?;
                let cpu_text = cpu.map_or_else(String::new, |us| format!("  {us:>6.1} CPU µs/msg"));
                eprintln!(
                    "  {:<12} round {round}  {rate:>9.0} msgs/s{cpu_text}",
                    figure.name()
                );
                samples.push((figure, rate, cpu));
            }
        }
        for figure in Figure::ALL {
            let of = |figure| samples.iter().filter(move |(f, ..)| *f == figure);
            let rates: Vec<f64> = of(figure).map(|(_, rate, _)| *rate).collect();
            let rounds = rates.len();
            // Round by round too: a ratio of two figures is the median of theirs by round.
            report
                .rounds
                .insert((figure.name().to_owned(), label.to_owned()), rates.clone());
            report.rows.push(Row {
                name: figure.name().to_owned(),
                backend: label,
                workers: 1,
                batch: figure.batch(),
                per_sec: median(rates),
                unit: "msgs/s",
                latency: None,
            });
            // The machine's CPU per message (bench, database and broker together): on a small
            // machine, what bounds a figure that waits on nothing.
            let cpu: Vec<f64> = of(figure).filter_map(|(_, _, cpu)| *cpu).collect();
            if cpu.len() == rounds {
                report.rounds.insert(
                    (format!("{}_cpu", figure.name()), label.to_owned()),
                    cpu.clone(),
                );
            }
            if !cpu.is_empty() {
                report.rows.push(Row {
                    name: format!("{}_cpu", figure.name()),
                    backend: label,
                    workers: 1,
                    batch: figure.batch(),
                    per_sec: median(cpu),
                    unit: "CPU µs/msg",
                    latency: None,
                });
            }
        }
        report.ratio("relay_vs_publish_only", "relay", "publish_only", label, 1);
        report.ratio(
            "relay_keep_published_vs_publish_only",
            "relay_keep_published",
            "publish_only",
            label,
            1,
        );
        // The machine's CPU a relayed message costs over a published one: what bounds the
        // relay's rate on a small machine, whatever the broker's speed.
        report.ratio(
            "relay_cpu_us_per_msg_vs_publish_only",
            "relay_cpu",
            "publish_only_cpu",
            label,
            1,
        );
        // The relay's floor: publishing, and the database's part of it done by hand.
        let floor = report.get("publish_only_cpu", label, 1)
            + report.get("database_part_by_hand_cpu", label, 1);
        let publish = report.get("publish_only_cpu", label, 1);
        report.record(
            &format!("relay_cpu_floor_vs_publish_only_{label}"),
            (floor.is_finite() && publish > 0.0).then(|| floor / publish),
        );
        report.ratio(
            "relay_keep_published_cpu_us_per_msg_vs_publish_only",
            "relay_keep_published_cpu",
            "publish_only_cpu",
            label,
            1,
        );
        report.ratio("relay_vs_handwritten", "relay", "handwritten", label, 1);
        report.rows.push(Row {
            name: "relay_100_per_sec".to_owned(),
            backend: label,
            workers: 1,
            batch: 1,
            per_sec: 100.0,
            unit: "msgs/s",
            latency: Some(latency),
        });
    }
    eprintln!("measuring the relay's per-key order against pipelining a key …");
    order::measure(&pool, &outbox, &nats_url, common, &mut report).await?;
    eprintln!("measuring relays side by side on 16 shards …");
    let scale_messages = if common.quick { 10_000 } else { 40_000 };
    let rates = scale::measure(&common.database, &nats_url, scale_messages).await?;
    let rate = |relays, far| {
        rates
            .iter()
            .find(|(r, f, _)| *r == relays && *f == far)
            .map(|(.., rate)| *rate)
    };
    for (relays, far, per_sec) in &rates {
        report.rows.push(Row {
            name: format!(
                "relays{relays}_{}",
                if *far { "slow_broker" } else { "fast_broker" }
            ),
            backend: "nats_postgres",
            workers: *relays,
            batch: if *far { 50 } else { 500 },
            per_sec: *per_sec,
            unit: "msgs/s",
            latency: None,
        });
    }
    let over = |a: Option<f64>, b: Option<f64>| a.zip(b).map(|(a, b)| a / b);
    report.record(
        "relays4_vs_relay1_slow_broker_nats_postgres",
        over(rate(4, true), rate(1, true)),
    );
    report.record(
        "relays2_vs_relay1_fast_broker_nats_postgres",
        over(rate(2, false), rate(1, false)),
    );
    Ok(report)
}

/// One figure's messages per second, from the start of the draining to the last confirmation
/// (and stamp), and the machine's CPU time per message meanwhile (in microseconds, where known).
async fn measure<P: Publish>(
    figure: Figure,
    pool: &PgPool,
    outbox: &Outbox<sqlx::Postgres>,
    publisher: P,
    queue: &Queue,
    messages: usize,
) -> anyhow::Result<(f64, Option<f64>)> {
    let topic = queue.topic();
    let per_message = |cpu: Option<CpuClock>| {
        cpu.and_then(|cpu| cpu.busy_since())
            .map(|secs| secs * 1e6 / messages as f64)
    };
    if figure == Figure::PublishOnly {
        // The messages the relay publishes, headers and all: its ordering key and place.
        let all: Vec<OutboxMessage> = (0..messages)
            .map(|n| {
                let mut message = OutboxMessage::new(format!("evt_{n}"), topic.clone(), payload(n));
                message.ordering_key = Some(format!("order-{}", n % KEYS));
                message.seq = (n / KEYS + 1) as i64;
                message
            })
            .collect();
        let (started, cpu) = (Instant::now(), CpuClock::now());
        for batch in all.chunks(PUBLISH_BATCH) {
            let mut outcomes = Outcomes::with_capacity(batch.len());
            publisher.publish(batch, &mut outcomes).await;
            for outcome in outcomes.into_results(batch.len()) {
                outcome?;
            }
        }
        let rate = messages as f64 / started.elapsed().as_secs_f64();
        return Ok((rate, per_message(cpu)));
    }
    preload(pool, &topic, messages, KEYS).await?;
    let (started, cpu) = (Instant::now(), CpuClock::now());
    match figure {
        Figure::Relay | Figure::RelayKeepPublished => {
            let relay = Relay::new(outbox.clone(), pool.clone(), publisher)
                .keep_published(figure == Figure::RelayKeepPublished);
            let relayed = relay
                .drain()
                .await?
                .ok_or_else(|| anyhow::anyhow!("another relay holds the bench's lease"))?;
            anyhow::ensure!(
                relayed.published as usize == messages,
                "the relay published {} of {messages}",
                relayed.published
            );
        }
        Figure::Handwritten => by_hand::handwritten(pool, &publisher).await?,
        Figure::DatabasePartByHand => by_hand::read_and_delete(pool).await?,
        Figure::PublishOnly => unreachable!("measured above"),
    }
    let rate = messages as f64 / started.elapsed().as_secs_f64();
    let cpu = per_message(cpu);
    let pending: i64 = sqlx::query_scalar(sqlx::AssertSqlSafe(format!(
        "SELECT count(*) FROM {TABLE} WHERE published_at IS NULL"
    )))
    .fetch_one(pool)
    .await?;
    anyhow::ensure!(pending == 0, "{}: {pending} left pending", figure.name());
    Ok((rate, cpu))
}

/// The ordering keys the messages are spread over.
const KEYS: usize = 100;

/// Empties the outbox and fills it with `messages` committed rows on `keys` ordering keys.
async fn preload(pool: &PgPool, topic: &str, messages: usize, keys: usize) -> anyhow::Result<()> {
    for table in [TABLE.to_owned(), format!("{TABLE}_keys")] {
        sqlx::query(sqlx::AssertSqlSafe(format!("TRUNCATE {table}")))
            .execute(pool)
            .await?;
    }
    sqlx::query(sqlx::AssertSqlSafe(format!(
        "INSERT INTO {TABLE} (message_id, topic, ordering_key, seq, payload) \
         SELECT 'evt_' || g, $1, 'order-' || (g % {keys}), g / {keys} + 1, \
         convert_to('{{\"id\":\"evt_' || g || '\",\"type\":\"OrderPaid\",\"order\":' || g || '}}', 'UTF8') \
         FROM generate_series(0, $2 - 1) AS g"
    )))
    .bind(topic)
    .bind(messages as i64)
    .execute(pool)
    .await?;
    sqlx::query(sqlx::AssertSqlSafe(format!("VACUUM ANALYZE {TABLE}")))
        .execute(pool)
        .await?;
    Ok(())
}

/// The n-th event.
fn payload(n: usize) -> Vec<u8> {
    format!(r#"{{"id":"evt_{n}","type":"OrderPaid","order":{n}}}"#).into_bytes()
}
