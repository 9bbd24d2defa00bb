//! The outbox relay's publisher on Kafka: the idempotent producer, the ordering key as the
//! record key, the message id in a header.

use guestlist_sqlx::{Confirmed, OutboxMessage, Publish, PublishError};
use rdkafka::error::{KafkaError, RDKafkaErrorCode};
use rdkafka::message::{Header, OwnedHeaders};
use rdkafka::producer::{FutureProducer, FutureRecord};

use crate::{Error, MESSAGE_ID_HEADER};

/// Publishes the outbox's messages to Kafka for a [`guestlist_sqlx::Relay`].
///
/// Each message goes to the topic named by its topic, keyed by its ordering key (so that a
/// key's messages share a partition and keep their order), with its id in the `message-id`
/// header, its ordering key and place in `guestlist-ordering-key` and `guestlist-seq`, and the
/// headers it was enqueued with. The producer is idempotent (`enable.idempotence`, `acks=all`):
/// its own retries neither duplicate nor reorder a partition's records. A relay's repeat after a
/// crash is a new record; the consumer's inbox drops it. A batch is sent without waiting between
/// records; the confirmations are awaited together.
///
/// The topics must exist (create them first): a missing one fails with what to do.
#[derive(Clone)]
pub struct KafkaPublisher {
    producer: FutureProducer,
}

impl std::fmt::Debug for KafkaPublisher {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("KafkaPublisher").finish_non_exhaustive()
    }
}

impl KafkaPublisher {
    /// An idempotent producer to the brokers `brokers` (`host:port`, comma-separated).
    pub fn connect(brokers: &str) -> Result<Self, Error> {
        Self::with_options(brokers, &[])
    }

    /// [`connect`](Self::connect) with librdkafka producer properties of your own
    /// (`security.protocol`, `linger.ms`, …); idempotence cannot be turned off.
    pub fn with_options(brokers: &str, options: &[(String, String)]) -> Result<Self, Error> {
        let producer = crate::producer_config(brokers, options).create()?;
        Ok(Self { producer })
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

/// The relay's error for a record Kafka did not store, saying what to do where it can.
fn refused(topic: &str, err: KafkaError) -> PublishError {
    match err.rdkafka_error_code() {
        Some(RDKafkaErrorCode::UnknownTopicOrPartition | RDKafkaErrorCode::UnknownTopic) => {
            PublishError::new(format!(
                "Kafka has no topic {topic}: create it first (kafka-topics.sh --create --topic {topic})"
            ))
        }
        Some(RDKafkaErrorCode::InvalidTopic) => PublishError::new(format!(
            "Kafka refuses the topic name {topic}: a topic is at most 249 characters of letters, \
             digits, '.', '_' and '-'"
        )),
        _ => PublishError::new(err),
    }
}

impl Publish for KafkaPublisher {
    async fn publish(&self, messages: &[OutboxMessage]) -> Vec<Result<Confirmed, PublishError>> {
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
            let sent = self.producer.send_result(record).map_err(|(err, _)| err);
            pending.push((message, sent));
        }
        let mut outcomes = Vec::with_capacity(pending.len());
        for (message, sent) in pending {
            let stored = match sent {
                Ok(delivery) => match delivery.await {
                    Ok(Ok(_)) => Ok(()),
                    Ok(Err((err, _))) => Err(err),
                    Err(_) => Err(KafkaError::Canceled),
                },
                Err(err) => Err(err),
            };
            outcomes.push(
                stored
                    .map(|()| Confirmed::New)
                    .map_err(|err| refused(&message.topic, err)),
            );
        }
        outcomes
    }
}
