//! The broker a command publishes to (`guestlist relay`, `guestlist inbox dead retry`): its
//! arguments, and its publisher, connected and checked, for the command's generic code.

use clap::Args;

use crate::database;

/// Which broker, and where. A command that cannot run without one refuses to start without it
/// ([`BrokerArgs::broker`]); the console runs without one, and retries nothing then.
#[derive(Debug, Clone, Args)]
pub(crate) struct BrokerArgs {
    /// Publish to NATS JetStream at this URL: each topic is a subject some stream captures.
    /// (The `nats` feature, on by default.)
    #[arg(long, env = "GUESTLIST_NATS_URL")]
    pub(crate) nats: Option<String>,
    /// Publish to RabbitMQ at this URL (amqp://user:password@host:5672/vhost). (The `amqp`
    /// feature, on by default.)
    #[arg(long, env = "GUESTLIST_AMQP_URL", conflicts_with = "nats")]
    pub(crate) amqp: Option<String>,
    /// Publish to Kafka through these brokers (host:port, comma-separated), with the
    /// idempotent producer: each topic is a Kafka topic (create it first), each ordering key
    /// the record key, the message id the `message-id` header. (The `kafka` feature:
    /// `cargo install guestlist-cli --features kafka`.)
    #[arg(long, env = "GUESTLIST_KAFKA_BROKERS", conflicts_with_all = ["nats", "amqp"])]
    pub(crate) kafka: Option<String>,
    /// Publish to Amazon SQS, configured from the AWS environment (AWS_REGION, AWS_PROFILE or
    /// AWS_ACCESS_KEY_ID, AWS_ENDPOINT_URL): each topic is a queue's name or URL (create it
    /// first). On a FIFO queue each ordering key is the message group and the message id the
    /// deduplication id. (The `sqs` feature: `cargo install guestlist-cli --features sqs`.)
    #[arg(long, conflicts_with_all = ["nats", "amqp", "kafka"])]
    pub(crate) sqs: bool,
    /// The endpoint of a local SQS server (moto, LocalStack, ElasticMQ), with the dummy
    /// credentials such servers take.
    #[arg(long, requires = "sqs")]
    pub(crate) sqs_endpoint: Option<String>,
}

/// The broker the arguments name.
#[cfg_attr(not(feature = "amqp"), allow(dead_code))] // the exchange is read by its publisher
pub(crate) enum Broker<'a> {
    Nats(&'a str),
    /// The URL, and the exchange ("" is the default exchange, which routes to the queue named
    /// by the topic).
    Amqp(&'a str, &'a str),
    Kafka(&'a str),
    Sqs(Option<&'a str>),
}

impl BrokerArgs {
    /// Whether a broker is named at all.
    pub(crate) fn given(&self) -> bool {
        self.nats.is_some() || self.amqp.is_some() || self.kafka.is_some() || self.sqs
    }

    /// The broker named, refused when this build left its publisher out; RabbitMQ's through
    /// `exchange`.
    pub(crate) fn broker<'a>(&'a self, exchange: &'a str) -> anyhow::Result<Broker<'a>> {
        let broker = self.named(exchange)?;
        if !broker.built_in() {
            return Err(not_built_in(&broker));
        }
        Ok(broker)
    }

    fn named<'a>(&'a self, exchange: &'a str) -> anyhow::Result<Broker<'a>> {
        Ok(match (&self.nats, &self.amqp, &self.kafka) {
            (Some(url), _, _) => Broker::Nats(url),
            (None, Some(url), _) => Broker::Amqp(url, exchange),
            (None, None, Some(brokers)) if brokers.trim().is_empty() => anyhow::bail!(
                "--kafka is empty: give the bootstrap brokers as host:port, comma-separated"
            ),
            (None, None, Some(brokers)) => Broker::Kafka(brokers),
            (None, None, None) if self.sqs => Broker::Sqs(self.sqs_endpoint.as_deref()),
            (None, None, None) => {
                anyhow::bail!("give the broker: --nats URL, --amqp URL, --kafka HOST:PORT or --sqs")
            }
        })
    }
}

impl Broker<'_> {
    /// The broker's name, as its own documentation spells it.
    fn name(&self) -> &'static str {
        match self {
            Broker::Nats(_) => "NATS JetStream",
            Broker::Amqp(..) => "RabbitMQ",
            Broker::Kafka(_) => "Kafka",
            Broker::Sqs(_) => "Amazon SQS",
        }
    }

    /// The feature of guestlist-cli that builds its publisher in.
    fn feature(&self) -> &'static str {
        match self {
            Broker::Nats(_) => "nats",
            Broker::Amqp(..) => "amqp",
            Broker::Kafka(_) => "kafka",
            Broker::Sqs(_) => "sqs",
        }
    }

    /// Whether this build has its publisher.
    fn built_in(&self) -> bool {
        match self {
            Broker::Nats(_) => cfg!(feature = "nats"),
            Broker::Amqp(..) => cfg!(feature = "amqp"),
            Broker::Kafka(_) => cfg!(feature = "kafka"),
            Broker::Sqs(_) => cfg!(feature = "sqs"),
        }
    }
}

/// What a build without the broker's publisher says: which build has it, and how to get one.
pub(crate) fn not_built_in(broker: &Broker<'_>) -> anyhow::Error {
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
            Broker::Amqp(url, _) => write!(f, "RabbitMQ at {}", database::redact(url)),
            Broker::Kafka(brokers) => write!(f, "Kafka at {brokers}"),
            Broker::Sqs(Some(endpoint)) => write!(f, "SQS at {endpoint}"),
            Broker::Sqs(None) => write!(f, "SQS"),
        }
    }
}

/// How long a command waits, at start, to hear from the broker.
#[cfg(any(feature = "kafka", feature = "sqs"))]
pub(crate) const BROKER_WAIT: std::time::Duration = std::time::Duration::from_secs(10);

/// Evaluates `$body` with `$publisher` bound to the broker's publisher, connected (and, for
/// the brokers that connect lazily, checked to answer): one expansion per publisher type, so
/// that the body runs generically. A broker left out of the build is refused; `unused:` names
/// what only the body uses, for a build with no broker at all.
macro_rules! with_publisher {
    ($broker:expr, |$publisher:ident| $body:expr $(, unused: $($unused:ident),+)?) => {
        match $broker {
            #[cfg(feature = "nats")]
            $crate::broker::Broker::Nats(url) => {
                let $publisher = guestlist_nats::JetStreamPublisher::builder(url)
                    .connect()
                    .await?;
                $body
            }
            #[cfg(feature = "amqp")]
            $crate::broker::Broker::Amqp(url, exchange) => {
                let $publisher = guestlist_amqp::RabbitPublisher::builder(url)
                    .exchange(exchange)
                    .connect()
                    .await?;
                $body
            }
            #[cfg(feature = "kafka")]
            $crate::broker::Broker::Kafka(brokers) => {
                let $publisher = guestlist_kafka::KafkaPublisher::builder(brokers)
                    .connect()
                    .await?;
                // librdkafka connects lazily: ask for the cluster's metadata, so that a broker
                // that is not there fails now, with what to check.
                $publisher.reachable($crate::broker::BROKER_WAIT).await?;
                $body
            }
            #[cfg(feature = "sqs")]
            $crate::broker::Broker::Sqs(endpoint) => {
                let builder = match endpoint {
                    Some(endpoint) => {
                        guestlist_sqs::check_endpoint(endpoint)?;
                        guestlist_sqs::SqsPublisher::builder()
                            .client(guestlist_sqs::local_client(endpoint))
                    }
                    None => guestlist_sqs::SqsPublisher::builder(),
                };
                let $publisher = builder.connect().await?;
                $publisher.reachable($crate::broker::BROKER_WAIT).await?;
                $body
            }
            // `BrokerArgs::broker` refused it already; a build with every broker never gets here.
            #[allow(unreachable_patterns)]
            missing => {
                $($(let _ = &$unused;)+)?
                Err($crate::broker::not_built_in(&missing))
            }
        }
    };
}
pub(crate) use with_publisher;

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
