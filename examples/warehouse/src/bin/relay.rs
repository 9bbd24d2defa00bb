//! The relay: publishes the warehouse's outbox (OrderPaid from `POST /orders`, PickTaskCreated
//! from the OrderPaid handler) to NATS JetStream, RabbitMQ, Kafka or SQS, each order's events in the order
//! they committed. Run two for availability: one publishes, the other takes over within the
//! lease when it dies.
//!
//! It prints `relay running as <holder>` once its tables and the broker's streams or queues are
//! there.

use std::time::Duration;

use clap::Parser;
use guestlist::amqp::RabbitPublisher;
use guestlist::consumer::shutdown_signal;
use guestlist::nats::JetStreamPublisher;
use guestlist::sqlx::Pool;
use guestlist::{Relay, outbox::Publish};
use warehouse_example::broker::{Kind, Orders};
use warehouse_example::db::Shop;
use warehouse_example::{warehouse, with_pool};

/// The warehouse's outbox relay.
#[derive(Parser)]
struct Args {
    /// postgres://… or sqlite:path: the warehouse's database.
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
    /// How long a relay that died keeps the other waiting.
    #[arg(long, default_value = "10s", value_parser = humantime::parse_duration)]
    lease: Duration,
    /// Export spans over OTLP/HTTP to the collector at this URL (http://host:4318).
    #[arg(long, env = "OTEL_EXPORTER_OTLP_ENDPOINT")]
    otlp_endpoint: Option<String>,
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let args = Args::parse();
    let _export =
        warehouse_example::telemetry::init("warehouse-relay", args.otlp_endpoint.as_deref())?;
    let orders = Orders::new(&args.broker, &args.queue);
    orders.check()?;
    with_pool!(&args.database, |pool| {
        warehouse::migrate(&pool).await?;
        orders.declare().await?;
        match orders.kind() {
            Kind::Nats => {
                let publisher = JetStreamPublisher::builder(&args.broker).connect().await?;
                relay(pool, publisher, args.lease).await?;
            }
            Kind::Rabbit => {
                let publisher = RabbitPublisher::builder(&args.broker).connect().await?;
                relay(pool, publisher, args.lease).await?;
            }
            Kind::Kafka => relay(pool, orders.kafka_publisher().await?, args.lease).await?,
            Kind::Sqs => relay(pool, orders.sqs_publisher().await?, args.lease).await?,
        }
    });
    Ok(())
}

async fn relay<DB: Shop, P: Publish>(
    pool: Pool<DB>,
    publisher: P,
    lease: Duration,
) -> anyhow::Result<()> {
    let holder = format!("warehouse-relay-{}", std::process::id());
    let relay = Relay::new(warehouse::outbox::<DB>(), pool, publisher)
        .lease(lease)
        .holder(holder.as_str());
    println!("relay running as {holder}");
    let relayed = relay.run(shutdown_signal()).await?;
    println!(
        "relay stopped: published {} ({} dropped by the broker as repeats)",
        relayed.published, relayed.duplicates
    );
    Ok(())
}
