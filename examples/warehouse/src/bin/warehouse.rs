//! The warehouse service: consumes OrderPaid from NATS (`--broker nats://…`), RabbitMQ
//! (`amqp://…`), Kafka (`kafka://host:port`) or SQS (`sqs://host:port` for a local SQS,
//! `sqs://aws`), and handles each paid order in three steps that a redelivery resumes after:
//! charges through payments with the key it carries, reserves the stock, then picks and writes
//! PickTaskCreated to its outbox, and serves `POST /orders` behind the
//! Idempotency-Key layer (each order's OrderPaid goes to the outbox too; run `relay` to
//! publish them).
//!
//! It prints `warehouse API on http://…` once ready (tables there, listener bound, broker
//! consumer attached); `GET /readyz` answers 200 from then on, 503 before, and 503 with the
//! cause while the consumer waits out an outage of its database.

use std::net::SocketAddr;
use std::time::Duration;

use clap::Parser;
use guestlist::consumer::shutdown_signal;
use warehouse_example::broker::{Kind, Orders};
use warehouse_example::picking::Picking;
use warehouse_example::ready::Readiness;
use warehouse_example::warehouse::{Topics, Tuning};
use warehouse_example::{warehouse, with_pool};

/// The warehouse: picks paid orders exactly once, and charges through payments with the key it
/// carries.
#[derive(Parser)]
struct Args {
    /// postgres://… or sqlite:path
    #[arg(long, default_value = "sqlite:warehouse.db")]
    database: String,
    /// nats://host:port, amqp://user:password@host:port/%2f, kafka://host:port (several:
    /// kafka://a:9092,b:9092)
    /// or sqs://host:port (a local SQS) or sqs://aws (from the AWS environment)
    #[arg(long, default_value = "nats://127.0.0.1:4222")]
    broker: String,
    /// The stream, queue or topic of OrderPaid events (declared when missing).
    #[arg(long, default_value = "ORDERS")]
    queue: String,
    /// The payments service.
    #[arg(long, default_value = "http://127.0.0.1:4000")]
    payments: String,
    /// Where the warehouse's own API listens.
    #[arg(long, default_value = "127.0.0.1:4100")]
    listen: String,
    /// How long NATS waits for an acknowledgement before it redelivers (e.g. 30s); the other
    /// brokers have their own (a Kafka group's session, an SQS queue's visibility timeout).
    #[arg(long, default_value = "30s", value_parser = humantime::parse_duration)]
    ack_wait: Duration,
    /// How long a warehouse holds an event's steps before another may take them over (a
    /// warehouse that died mid-steps delays its events by this much).
    #[arg(long, default_value = "30s", value_parser = humantime::parse_duration)]
    step_lease: Duration,
    /// Deliveries after which an event never handled is dead-lettered.
    #[arg(long, default_value_t = 5)]
    max_deliveries: u32,
    /// How many customers' events are handled at once (each customer's in the order placed);
    /// 1: one event at a time, in the broker's order.
    #[arg(long, default_value_t = 1)]
    concurrency: usize,
    /// Export spans over OTLP/HTTP to the collector at this URL (http://host:4318).
    #[arg(long, env = "OTEL_EXPORTER_OTLP_ENDPOINT")]
    otlp_endpoint: Option<String>,
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let args = Args::parse();
    let _export = warehouse_example::telemetry::init("warehouse", args.otlp_endpoint.as_deref())?;
    let orders = Orders::new(&args.broker, &args.queue);
    orders.check()?;
    let topics = Topics::of(&orders)?;
    let listener = tokio::net::TcpListener::bind(&args.listen).await?;
    let addr = listener.local_addr()?;
    let readiness = Readiness::waiting_for("its tables");
    with_pool!(&args.database, |pool| {
        // Serve at once, so that /readyz can say "not yet"; the API answers 503 until ready.
        let app = readiness.gate(warehouse::api(pool.clone(), topics.clone())?);
        tokio::spawn(async move { axum::serve(listener, app).await });
        warehouse::migrate(&pool).await?;
        readiness.now_waiting_for("its broker consumer");
        orders.declare().await?;
        // Each broker's source is a type of its own: one arm each, the same three steps.
        macro_rules! consume {
            ($source:expr) => {{
                let source = $source.await?;
                ready(&readiness, addr);
                let shutdown = shutdown_signal();
                let picking = Picking::new(args.payments, topics.picks);
                let tuning = Tuning {
                    step_lease: args.step_lease,
                    max_deliveries: args.max_deliveries,
                    concurrency: args.concurrency,
                };
                let keys = orders.keys();
                warehouse::consume(source, keys, pool, picking, tuning, &readiness, shutdown)
                    .await?;
            }};
        }
        match orders.kind() {
            Kind::Nats => consume!(orders.nats_source(args.ack_wait)),
            Kind::Rabbit => consume!(orders.rabbit_source()),
            Kind::Kafka => consume!(orders.kafka_source()),
            Kind::Sqs => consume!(orders.sqs_source()),
        }
    });
    Ok(())
}

/// Tables there, listener bound, consumer attached: says so, on `/readyz` and in the line that
/// scripts and tests wait for.
fn ready(readiness: &Readiness, addr: SocketAddr) {
    readiness.ready();
    println!("warehouse API on http://{addr}");
}
