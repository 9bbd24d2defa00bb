//! The outbox relay's publisher on Kafka: the idempotent producer, the ordering key as the
//! record key, the message id in a header.

use std::sync::Arc;

use guestlist_core::{Confirmed, OutboxMessage, Outcomes, Publish, PublishError};
use rdkafka::error::{KafkaError, RDKafkaErrorCode};
use rdkafka::message::{Header, OwnedHeaders};
use rdkafka::producer::FutureRecord;

use crate::renewing::Renewing;
use crate::{Error, MESSAGE_ID_HEADER};

/// Publishes the outbox's messages to Kafka for the outbox's relay (`guestlist_sqlx::Relay`).
///
/// Each message goes to the topic named by its topic, keyed by its ordering key (so that a
/// key's messages share a partition and keep their order), with its id in the `message-id`
/// header, its ordering key and place in `guestlist-ordering-key` and `guestlist-seq`, and the
/// headers it was enqueued with. The producer is idempotent (`enable.idempotence`, `acks=all`):
/// its own retries neither duplicate nor reorder a partition's records. A relay's repeat after a
/// crash is a new record; the consumer's inbox drops it. A batch is sent without waiting between
/// records; the confirmations are awaited together.
///
/// An idempotent producer librdkafka stops for good (its fatal error: fenced for good, or its
/// sequence lost), or one the brokers fenced (`ProducerFenced` on a record), is replaced: the
/// messages it failed go again on the relay's next round, as after an outage.
///
/// The topics must exist (create them first): a missing one fails with what to do.
#[derive(Clone)]
pub struct KafkaPublisher {
    producer: Arc<Renewing>,
    max_message_bytes: usize,
    brokers: String,
}

/// librdkafka's `message.max.bytes` unless set.
const DEFAULT_MESSAGE_MAX_BYTES: usize = 1_000_000;
/// What a record's framing adds to its key, value and headers, over-counted a little.
const RECORD_OVERHEAD: usize = 128;

impl std::fmt::Debug for KafkaPublisher {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("KafkaPublisher").finish_non_exhaustive()
    }
}

/// Settings for a [`KafkaPublisher`]; [`connect`](Self::connect) makes its producer.
#[derive(Debug, Clone)]
#[must_use]
pub struct KafkaPublisherBuilder {
    brokers: String,
    options: Vec<(String, String)>,
}

impl KafkaPublisher {
    /// Settings for an idempotent producer to the brokers `brokers` (`host:port`,
    /// comma-separated).
    ///
    /// ```no_run
    /// # async fn run() -> Result<(), guestlist_kafka::Error> {
    /// let publisher = guestlist_kafka::KafkaPublisher::builder("127.0.0.1:9092")
    ///     .option("linger.ms", "5")
    ///     .connect()
    ///     .await?;
    /// # let _ = publisher; Ok(()) }
    /// ```
    pub fn builder(brokers: &str) -> KafkaPublisherBuilder {
        KafkaPublisherBuilder {
            brokers: brokers.to_owned(),
            options: Vec::new(),
        }
    }
}

impl KafkaPublisherBuilder {
    /// Sets a librdkafka producer property (`security.protocol`, `linger.ms`, …); idempotence
    /// cannot be turned off.
    pub fn option(mut self, key: &str, value: &str) -> Self {
        self.options.push((key.to_owned(), value.to_owned()));
        self
    }

    /// Makes the producer. librdkafka connects lazily: [`KafkaPublisher::reachable`] checks the
    /// brokers answer.
    pub async fn connect(self) -> Result<KafkaPublisher, Error> {
        let producer = Renewing::new(crate::producer_config(&self.brokers, &self.options))?;
        let max_message_bytes = self
            .options
            .iter()
            .rev()
            .find(|(key, _)| key == "message.max.bytes")
            .and_then(|(_, value)| value.parse().ok())
            .unwrap_or(DEFAULT_MESSAGE_MAX_BYTES);
        Ok(KafkaPublisher {
            producer: Arc::new(producer),
            max_message_bytes,
            brokers: self.brokers,
        })
    }
}

impl KafkaPublisher {
    /// Asks the brokers for the cluster's metadata, waiting at most `wait`: librdkafka
    /// connects lazily, so a producer to brokers that are not there would otherwise look
    /// healthy until its first message timed out. A relay checks this at start.
    pub async fn reachable(&self, wait: std::time::Duration) -> Result<(), Error> {
        use rdkafka::producer::Producer;
        let producer = self.producer.current();
        let asked = tokio::task::spawn_blocking(move || {
            producer.client().fetch_metadata(None, wait).map(drop)
        })
        .await;
        let unreachable = |reason: String| Error::Unreachable {
            brokers: self.brokers.clone(),
            waited: wait,
            reason,
        };
        match asked {
            Ok(Ok(())) => Ok(()),
            Ok(Err(err)) => Err(unreachable(err.to_string())),
            Err(err) => Err(unreachable(err.to_string())),
        }
    }

    fn headers(message: &OutboxMessage) -> OwnedHeaders {
        let seq = message.seq.to_string();
        let mut headers =
            OwnedHeaders::new_with_capacity(3 + message.headers.len()).insert(Header {
                key: MESSAGE_ID_HEADER,
                value: Some(message.message_id.as_str()),
            });
        if let Some(key) = &message.ordering_key {
            headers = headers
                .insert(Header {
                    key: "guestlist-ordering-key",
                    value: Some(key.as_str()),
                })
                .insert(Header {
                    key: "guestlist-seq",
                    value: Some(seq.as_str()),
                });
        }
        for (name, value) in &message.headers {
            headers = headers.insert(Header {
                key: name,
                value: Some(value.as_str()),
            });
        }
        headers
    }
}

/// The relay's error for a record Kafka did not store, of its kind, saying what to do where
/// it can.
fn refused(topic: &str, err: &KafkaError) -> PublishError {
    match err.rdkafka_error_code() {
        // The topic may be created later: counted against the message, retried.
        Some(RDKafkaErrorCode::UnknownTopicOrPartition | RDKafkaErrorCode::UnknownTopic) => {
            PublishError::new(format!(
                "Kafka has no topic {topic}: create it first (kafka-topics.sh --create --topic {topic})"
            ))
        }
        Some(RDKafkaErrorCode::InvalidTopic) => PublishError::unpublishable(format!(
            "Kafka refuses the topic name {topic}: a topic is at most 249 characters of letters, \
             digits, '.', '_' and '-'"
        )),
        Some(RDKafkaErrorCode::MessageSizeTooLarge | RDKafkaErrorCode::InvalidRecord) => {
            PublishError::unpublishable(err.clone())
        }
        Some(
            RDKafkaErrorCode::TopicAuthorizationFailed | RDKafkaErrorCode::InvalidRequiredAcks,
        ) => PublishError::new(err.clone()),
        // Timed out, no broker up, the local queue full, the transport: not the message.
        _ => PublishError::outage(err.clone()),
    }
}

impl Publish for KafkaPublisher {
    fn check(&self, message: &OutboxMessage) -> Result<(), PublishError> {
        let headers: usize = message
            .headers
            .iter()
            .map(|(name, value)| name.len() + value.len() + 10)
            .sum();
        let size = message.payload.len()
            + message.ordering_key.as_ref().map_or(0, |key| 2 * key.len())
            + message.message_id.len()
            + headers
            + RECORD_OVERHEAD;
        if size > self.max_message_bytes {
            return Err(PublishError::unpublishable(format!(
                "the record takes about {size} bytes, over the producer's message.max.bytes of \
                 {}: raise it (and the brokers' message.max.bytes) or send less",
                self.max_message_bytes
            )));
        }
        if message.topic.is_empty()
            || message.topic.len() > 249
            || !message
                .topic
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'_' | b'-'))
        {
            return Err(PublishError::unpublishable(format!(
                "Kafka refuses the topic name {:?}: a topic is at most 249 characters of \
                 letters, digits, '.', '_' and '-'",
                message.topic
            )));
        }
        Ok(())
    }

    async fn publish(&self, messages: &[OutboxMessage], outcomes: &mut Outcomes) {
        let producer = self.producer.current();
        let mut pending = Vec::with_capacity(messages.len());
        for message in messages {
            let mut record = FutureRecord::<str, [u8]>::to(&message.topic)
                .payload(&message.payload)
                .headers(Self::headers(message));
            if let Some(key) = &message.ordering_key {
                record = record.key(key.as_str());
            }
            // Queued without waiting; librdkafka batches and pipelines them. A full local queue
            // fails the message, and the relay tries it again after its backoff.
            let sent = producer.send_result(record).map_err(|(err, _)| err);
            pending.push((message, sent));
        }
        let mut failures = Vec::new();
        for (message, sent) in pending {
            let stored = match sent {
                Ok(delivery) => match delivery.await {
                    Ok(Ok(_)) => Ok(()),
                    Ok(Err((err, _))) => Err(err),
                    Err(_) => Err(KafkaError::Canceled),
                },
                Err(err) => Err(err),
            };
            outcomes.push(stored.map(|()| Confirmed::New).map_err(|err| {
                let refused = refused(&message.topic, &err);
                failures.push(err);
                refused
            }));
        }
        if !failures.is_empty() {
            self.producer.renew_if_stopped(producer, &failures);
        }
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use guestlist_core::{FailureKind, OutboxMessage, Outcomes, Publish};
    use rdkafka::admin::{AdminClient, AdminOptions, NewTopic, TopicReplication};
    use rdkafka::client::DefaultClientContext;
    use rdkafka::consumer::{BaseConsumer, Consumer};
    use rdkafka::producer::Producer;

    use super::KafkaPublisher;

    /// The test script's Kafka.
    fn brokers() -> String {
        std::env::var("GUESTLIST_TEST_KAFKA_BROKERS").unwrap_or_else(|_| "127.0.0.1:9092".into())
    }

    async fn publish_one(publisher: &KafkaPublisher, topic: &str, id: &str) -> Option<FailureKind> {
        let mut outcomes = Outcomes::with_capacity(1);
        let message = OutboxMessage::new(id, topic, id.as_bytes().to_vec());
        publisher
            .publish(std::slice::from_ref(&message), &mut outcomes)
            .await;
        outcomes.into_results(1).remove(0).err().map(|e| e.kind())
    }

    /// The records the topic's single partition holds.
    fn stored(topic: &str) -> i64 {
        let reader: BaseConsumer = rdkafka::ClientConfig::new()
            .set("bootstrap.servers", brokers())
            .create()
            .expect("a Kafka reader");
        let (low, high) = reader
            .fetch_watermarks(topic, 0, Duration::from_secs(10))
            .expect("the topic's offsets");
        high - low
    }

    /// A producer fenced by the brokers (seen in the soak: tansu fenced a relay's idempotent
    /// producer, which then failed every record for the rest of the run) is replaced, and the
    /// message it failed goes on the next round.
    #[tokio::test(flavor = "multi_thread")]
    async fn a_producer_stopped_for_good_is_replaced_and_the_next_round_publishes() {
        let topic = format!("gl.fenced.{}", std::process::id());
        let admin: AdminClient<DefaultClientContext> = rdkafka::ClientConfig::new()
            .set("bootstrap.servers", brokers())
            .create()
            .expect("a Kafka admin client");
        admin
            .create_topics(
                &[NewTopic::new(&topic, 1, TopicReplication::Fixed(1))],
                &AdminOptions::new(),
            )
            .await
            .expect("the topic");
        let publisher = KafkaPublisher::builder(&brokers())
            .connect()
            .await
            .expect("a publisher");
        assert_eq!(publish_one(&publisher, &topic, "before").await, None);

        let stopped = publisher.producer.current();
        #[allow(unsafe_code)]
        // SAFETY: a live client's pointer, and a NUL-terminated reason; librdkafka's own hook
        // for raising a fatal error as the brokers' fencing does.
        unsafe {
            rdkafka::bindings::rd_kafka_test_fatal_error(
                stopped.client().native_ptr(),
                rdkafka::bindings::rd_kafka_resp_err_t::RD_KAFKA_RESP_ERR_PRODUCER_FENCED,
                c"fenced by the test".as_ptr(),
            );
        }
        assert!(
            stopped.client().fatal_error().is_some(),
            "the producer stopped"
        );
        drop(stopped);

        // The round the stopped producer fails is an outage, never counted against the message.
        assert_eq!(
            publish_one(&publisher, &topic, "after").await,
            Some(FailureKind::Outage)
        );
        assert_eq!(publish_one(&publisher, &topic, "after").await, None);
        assert_eq!(publish_one(&publisher, &topic, "later").await, None);
        assert_eq!(stored(&topic), 3, "before, after and later, each once");
        let _ = admin.delete_topics(&[&topic], &AdminOptions::new()).await;
    }
}
