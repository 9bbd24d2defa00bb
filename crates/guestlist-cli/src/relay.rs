//! `guestlist relay`: publishes an outbox table's committed messages to NATS JetStream,
//! RabbitMQ, Kafka or Amazon SQS, for services in any language that write the table.

use std::net::SocketAddr;
use std::time::Duration;

use clap::Args;
use guestlist::sqlx::Pool;
use guestlist::{Backend, Outbox, Relay, outbox::Publish};
#[cfg(feature = "amqp")]
use guestlist_amqp::RabbitPublisher;
#[cfg(feature = "kafka")]
use guestlist_kafka::KafkaPublisher;
#[cfg(feature = "nats")]
use guestlist_nats::JetStreamPublisher;
#[cfg(feature = "sqs")]
use guestlist_sqs::SqsPublisher;

use crate::database::{self, DatabaseUrl, with_pool};
use crate::signal::Terminated;

#[derive(Debug, Args)]
#[command(group(clap::ArgGroup::new("broker").required(true).args(["nats", "amqp", "kafka", "sqs"])))]
pub(crate) struct RelayArgs {
    #[command(flatten)]
    database: DatabaseUrl,
    /// The outbox table (create it with `guestlist migrate --outbox`).
    #[arg(
        long = "outbox-table",
        alias = "table",
        default_value = "guestlist_outbox"
    )]
    table: String,
    /// Publish to NATS JetStream at this URL: each topic is a subject some stream captures.
    /// (The `nats` feature, on by default.)
    #[arg(long, env = "GUESTLIST_NATS_URL")]
    nats: Option<String>,
    /// Publish to RabbitMQ at this URL (amqp://user:password@host:5672/vhost). (The `amqp`
    /// feature, on by default.)
    #[arg(long, env = "GUESTLIST_AMQP_URL", conflicts_with = "nats")]
    amqp: Option<String>,
    /// Publish to Kafka through these brokers (host:port, comma-separated), with the
    /// idempotent producer: each topic is a Kafka topic (create it first), each ordering key
    /// the record key, the message id the `message-id` header. (The `kafka` feature:
    /// `cargo install guestlist-cli --features kafka`.)
    #[arg(long, env = "GUESTLIST_KAFKA_BROKERS", conflicts_with_all = ["nats", "amqp"])]
    kafka: Option<String>,
    /// Publish to Amazon SQS, configured from the AWS environment (AWS_REGION, AWS_PROFILE or
    /// AWS_ACCESS_KEY_ID, AWS_ENDPOINT_URL): each topic is a queue's name or URL (create it
    /// first). On a FIFO queue each ordering key is the message group and the message id the
    /// deduplication id. (The `sqs` feature: `cargo install guestlist-cli --features sqs`.)
    #[arg(long, conflicts_with_all = ["nats", "amqp", "kafka"])]
    sqs: bool,
    /// The endpoint of a local SQS server (moto, LocalStack, ElasticMQ), with the dummy
    /// credentials such servers take.
    #[arg(long, requires = "sqs")]
    sqs_endpoint: Option<String>,
    /// The RabbitMQ exchange; the topic is the routing key. The default exchange ("") routes to
    /// the queue named by the topic.
    #[arg(long, default_value = "", requires = "amqp")]
    exchange: String,
    /// Messages per round: published together, confirmed together, stamped together.
    #[arg(long, default_value_t = 500)]
    batch: usize,
    /// How long a crashed relay keeps a standing-by one waiting.
    #[arg(long, value_parser = humantime::parse_duration, default_value = "10s")]
    lease: Duration,
    /// How often an idle relay looks for messages without being woken (PostgreSQL wakes it on
    /// commit; SQLite and MySQL rely on this).
    #[arg(long, value_parser = humantime::parse_duration, default_value = "500ms")]
    poll: Duration,
    /// The name this relay holds the lease under, shown by `guestlist stats`; give each relay
    /// its own (defaults to relay-<pid>-<random>).
    #[arg(long)]
    holder: Option<String>,
    /// Refusals of one message (no queue or stream takes its topic) before it moves to the
    /// outgoing dead letters (`guestlist outbox dead list`); a message the broker can never
    /// take (too large, an id it cannot carry) goes there at once.
    #[arg(long, default_value_t = 10)]
    max_attempts: u32,
    /// How long a round waits for the broker's confirmations before it counts the rest as an
    /// outage (the next rounds then take fewer messages).
    #[arg(long, value_parser = humantime::parse_duration, default_value = "45s")]
    confirm_timeout: Duration,
    /// Where /metrics (Prometheus text), /healthz (the database answers) and /readyz (no
    /// outage of the broker or the database under way) listen; off unless set.
    #[arg(long)]
    metrics_listen: Option<SocketAddr>,
    /// Keep each published message's row, stamped with when it went out, until `guestlist
    /// purge --outbox` deletes it by age (default: delete it once the broker confirmed it).
    /// Kept rows show what was published and when, and make an enqueue retried after its
    /// message went out add nothing; they cost the database a second row version per message.
    #[arg(long)]
    keep_published: bool,
}

/// How long the relay waits, at start, to hear from the broker.
#[cfg(any(feature = "kafka", feature = "sqs"))]
const BROKER_WAIT: Duration = Duration::from_secs(10);

pub(crate) async fn run(args: RelayArgs) -> anyhow::Result<()> {
    let terminated = Terminated::install()?;
    // Which broker, before anything is opened: a missing one is the first thing to hear.
    broker(&args)?;
    let pool = database::connect_existing(&args.database, 5).await?;
    with_pool!(pool, |pool| relay(pool, &args, terminated).await)
}

async fn relay<DB: Backend>(
    pool: Pool<DB>,
    args: &RelayArgs,
    terminated: Terminated,
) -> anyhow::Result<()> {
    let outbox = Outbox::<DB>::with_table(&args.table)?;
    // A missing table fails here, with what to do, rather than round after round.
    let stats = outbox.stats(&pool).await?;
    tracing::info!(table = %args.table, pending = stats.pending, "outbox found");
    match broker(args)? {
        #[cfg(feature = "nats")]
        Broker::Nats(url) => {
            let publisher = JetStreamPublisher::builder(url).connect().await?;
            publish(pool, outbox, publisher, args, terminated).await
        }
        #[cfg(feature = "amqp")]
        Broker::Amqp(url) => {
            let publisher = RabbitPublisher::builder(url)
                .exchange(&args.exchange)
                .connect()
                .await?;
            publish(pool, outbox, publisher, args, terminated).await
        }
        #[cfg(feature = "kafka")]
        Broker::Kafka(brokers) => {
            let publisher = KafkaPublisher::builder(brokers).connect().await?;
            // librdkafka connects lazily: ask for the cluster's metadata, so that a broker
            // that is not there fails now, with what to check.
            publisher.reachable(BROKER_WAIT).await?;
            publish(pool, outbox, publisher, args, terminated).await
        }
        #[cfg(feature = "sqs")]
        Broker::Sqs(endpoint) => {
            let builder = match endpoint {
                Some(endpoint) => {
                    guestlist_sqs::check_endpoint(endpoint)?;
                    SqsPublisher::builder().client(guestlist_sqs::local_client(endpoint))
                }
                None => SqsPublisher::builder(),
            };
            let publisher = builder.connect().await?;
            publisher.reachable(BROKER_WAIT).await?;
            publish(pool, outbox, publisher, args, terminated).await
        }
        // `broker` refused it already; a build with every broker never gets here.
        #[allow(unreachable_patterns)]
        missing => {
            drop((pool, outbox, terminated));
            Err(not_built_in(&missing))
        }
    }
}

/// The broker the arguments name.
enum Broker<'a> {
    Nats(&'a str),
    Amqp(&'a str),
    Kafka(&'a str),
    Sqs(Option<&'a str>),
}

/// The broker the arguments name, refused when this build left its publisher out.
fn broker(args: &RelayArgs) -> anyhow::Result<Broker<'_>> {
    let broker = named(args)?;
    if !broker.built_in() {
        return Err(not_built_in(&broker));
    }
    Ok(broker)
}

fn named(args: &RelayArgs) -> anyhow::Result<Broker<'_>> {
    Ok(match (&args.nats, &args.amqp, &args.kafka) {
        (Some(url), _, _) => Broker::Nats(url),
        (None, Some(url), _) => Broker::Amqp(url),
        (None, None, Some(brokers)) if brokers.trim().is_empty() => anyhow::bail!(
            "--kafka is empty: give the bootstrap brokers as host:port, comma-separated"
        ),
        (None, None, Some(brokers)) => Broker::Kafka(brokers),
        (None, None, None) if args.sqs => Broker::Sqs(args.sqs_endpoint.as_deref()),
        (None, None, None) => {
            anyhow::bail!("give the broker: --nats URL, --amqp URL, --kafka HOST:PORT or --sqs")
        }
    })
}

impl Broker<'_> {
    /// The broker's name, as its own documentation spells it.
    fn name(&self) -> &'static str {
        match self {
            Broker::Nats(_) => "NATS JetStream",
            Broker::Amqp(_) => "RabbitMQ",
            Broker::Kafka(_) => "Kafka",
            Broker::Sqs(_) => "Amazon SQS",
        }
    }

    /// The feature of guestlist-cli that builds its publisher in.
    fn feature(&self) -> &'static str {
        match self {
            Broker::Nats(_) => "nats",
            Broker::Amqp(_) => "amqp",
            Broker::Kafka(_) => "kafka",
            Broker::Sqs(_) => "sqs",
        }
    }

    /// Whether this build has its publisher.
    fn built_in(&self) -> bool {
        match self {
            Broker::Nats(_) => cfg!(feature = "nats"),
            Broker::Amqp(_) => cfg!(feature = "amqp"),
            Broker::Kafka(_) => cfg!(feature = "kafka"),
            Broker::Sqs(_) => cfg!(feature = "sqs"),
        }
    }
}

/// What a build without the broker's publisher says: which build has it, and how to get one.
fn not_built_in(broker: &Broker<'_>) -> anyhow::Error {
    let feature = broker.feature();
    anyhow::anyhow!(
        "this guestlist was built without {name}: its publisher is the `{feature}` feature. \
         Install a guestlist that has it with `cargo install guestlist-cli --features {feature}` \
         (`--features full` builds every broker in), or from a clone run \
         `cargo run --release -p guestlist-cli --features {feature} -- relay ...`",
        name = broker.name()
    )
}

impl std::fmt::Display for Broker<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Broker::Nats(url) => write!(f, "NATS at {}", database::redact(url)),
            Broker::Amqp(url) => write!(f, "RabbitMQ at {}", database::redact(url)),
            Broker::Kafka(brokers) => write!(f, "Kafka at {brokers}"),
            Broker::Sqs(Some(endpoint)) => write!(f, "SQS at {endpoint}"),
            Broker::Sqs(None) => write!(f, "SQS"),
        }
    }
}

#[cfg_attr(
    not(any(feature = "nats", feature = "amqp", feature = "kafka", feature = "sqs")),
    allow(dead_code)
)]
async fn publish<DB: Backend, P: Publish>(
    pool: Pool<DB>,
    outbox: Outbox<DB>,
    publisher: P,
    args: &RelayArgs,
    terminated: Terminated,
) -> anyhow::Result<()> {
    let (stop, stopped) = tokio::sync::watch::channel(false);
    let mut relay = Relay::new(outbox, pool.clone(), publisher)
        .batch(args.batch)
        .lease(args.lease)
        .poll(args.poll)
        .max_attempts(args.max_attempts)
        .confirm_timeout(args.confirm_timeout)
        .keep_published(args.keep_published);
    if let Some(addr) = args.metrics_listen {
        let mut stopped = stopped.clone();
        crate::ops::serve(addr, pool, Some(relay.health()), async move {
            let _ = stopped.wait_for(|stop| *stop).await;
        })
        .await?;
    }
    if let Some(holder) = &args.holder {
        relay = relay.holder(holder.clone());
    }
    println!(
        "relaying {} on {} to {}",
        args.table,
        database::redact(&args.database),
        broker(args)?
    );
    let relayed = relay.run(terminated.wait()).await?;
    let _ = stop.send(true);
    println!(
        "stopped: published {} ({} dropped by the broker as repeats), {} publishes unconfirmed, {} dead-lettered, lease taken {} times",
        relayed.published,
        relayed.duplicates,
        relayed.failures,
        relayed.dead_lettered,
        relayed.leases_taken
    );
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_broker_left_out_of_the_build_says_which_feature_brings_it() {
        let message = not_built_in(&Broker::Kafka("127.0.0.1:9092")).to_string();
        assert!(message.contains("without Kafka"), "{message}");
        assert!(
            message.contains("cargo install guestlist-cli --features kafka"),
            "{message}"
        );
        assert!(
            message.contains("cargo run --release -p guestlist-cli --features kafka -- relay"),
            "{message}"
        );
        let message = not_built_in(&Broker::Sqs(None)).to_string();
        assert!(message.contains("--features sqs"), "{message}");
    }
}
