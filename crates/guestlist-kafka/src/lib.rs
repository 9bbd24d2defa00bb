//! guestlist's consumer on Kafka.
//!
//! [`KafkaSource`] is a member of a consumer group: several instances share a topic's
//! partitions, and each partition's records come in order. Offsets are committed only after
//! the batch's transaction committed, and only past an unbroken run of done records, so a
//! crash or a rebalance replays from committed work and the inbox answers the replays as
//! duplicates. A revoked partition is given up once the batch in hand from it is done and its
//! offsets committed. A failed record is handed back by seeking its partition to it after the
//! backoff (the records after it wait: per-partition order holds); a poison record goes to a
//! dead-letter topic with its error in a `guestlist-error` header, and its offset moves on.
//!
//! `IdFrom::BrokerId` reads the record's `message-id` header (what [`KafkaPublisher`] sets),
//! or its key with [`KafkaSourceBuilder::broker_id_from_key`]; headers, JSON fields and the
//! payload's SHA-256 work as on the other brokers.
//!
//! [`KafkaPublisher`] is the other direction: the outbox relay's publisher, with the idempotent
//! producer, the ordering key as the record key and the message id in a header.
//!
//! The client is [rdkafka](https://docs.rs/rdkafka), on librdkafka (built from source by the
//! crate; needs a C compiler and `make`): the Rust client that is maintained and implements
//! consumer groups with rebalance callbacks, which the offset-after-commit guarantee needs.
//!
//! The guide tells the whole story, with each part's guarantees and failure tables: see
//! [broker consumers](https://github.com/guestlist-rs/guestlist/blob/main/docs/guide/src/consumers.md)
//! (or build it locally with `mdbook serve docs/guide`).

use std::time::Duration;

use rdkafka::ClientConfig;
use rdkafka::consumer::{BaseConsumer, Consumer, ConsumerContext};

mod delivery;
mod parked;
mod partitions;
mod poller;
mod publisher;
mod rebalance;
mod renewing;
mod shared;
mod source;
mod turns;

pub use delivery::KafkaDelivery;
pub use publisher::{KafkaPublisher, KafkaPublisherBuilder};
pub use source::{KafkaSource, KafkaSourceBuilder};

/// The header that carries a record's message id: [`KafkaPublisher`] sets it, and
/// `IdFrom::BrokerId` reads it.
pub const MESSAGE_ID_HEADER: &str = "message-id";

/// A failure to set up the source or the publisher, with what to do about it.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// A topic does not exist.
    #[error(
        "Kafka topic {topic} does not exist: create it first (kafka-topics.sh --create --topic {topic}, or tansu topic create {topic})"
    )]
    MissingTopic {
        /// The topic looked for.
        topic: String,
    },
    /// No dead-letter topic was named.
    #[error(
        "Kafka has no dead-letter place of its own: name a topic with KafkaSourceBuilder::dead_letter (and create it)"
    )]
    NoDeadLetterTopic,
    /// The brokers could not be reached, or refused. librdkafka's error is in the message, and
    /// so not also given as the source (it would print twice under anyhow's `{:#}`).
    #[error("Kafka error: {0} — check that the brokers run and bootstrap.servers is right")]
    Kafka(rdkafka::error::KafkaError),
    /// No broker answered within the wait: nothing listens there, or not Kafka.
    #[error(
        "cannot reach Kafka at {brokers} within {waited:?} ({reason}): check that the brokers run \
         and that the bootstrap servers (--kafka) name them as host:port"
    )]
    Unreachable {
        /// The bootstrap servers tried.
        brokers: String,
        /// How long the check waited.
        waited: std::time::Duration,
        /// librdkafka's own words.
        reason: String,
    },
    /// The poll thread could not be started.
    #[error("cannot start the Kafka poll thread: {0}")]
    Thread(#[source] std::io::Error),
}

impl From<rdkafka::error::KafkaError> for Error {
    fn from(err: rdkafka::error::KafkaError) -> Self {
        Error::Kafka(err)
    }
}

/// A producer's settings: idempotent, every in-sync replica acknowledging.
fn producer_config(brokers: &str, options: &[(String, String)]) -> ClientConfig {
    let mut config = ClientConfig::new();
    config
        .set("bootstrap.servers", brokers)
        .set("message.timeout.ms", "30000")
        // A topic the brokers do not have fails its records after a second (librdkafka waits
        // 30 s by default, for a topic just created): the relay retries them with backoff.
        .set("topic.metadata.propagation.max.ms", "1000");
    for (key, value) in options {
        config.set(key, value);
    }
    config.set("enable.idempotence", "true").set("acks", "all");
    config
}

/// Fails with [`Error::MissingTopic`] for the first of `topics` the brokers do not have.
fn check_topics<C: ConsumerContext>(
    consumer: &BaseConsumer<C>,
    topics: &[String],
) -> Result<(), Error> {
    for topic in topics {
        let metadata = consumer.fetch_metadata(Some(topic), Duration::from_secs(10))?;
        let found = metadata
            .topics()
            .iter()
            .any(|t| t.name() == topic && t.error().is_none() && !t.partitions().is_empty());
        if !found {
            return Err(Error::MissingTopic {
                topic: topic.clone(),
            });
        }
    }
    Ok(())
}
