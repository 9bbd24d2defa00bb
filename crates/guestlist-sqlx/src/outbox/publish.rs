//! What a relay hands a broker, and what the broker answers.

use std::future::Future;

/// A committed message the relay is publishing, as read from the outbox.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct OutboxMessage {
    /// The message's id: publish it where the broker deduplicates (`Nats-Msg-Id`, AMQP's
    /// `message_id`), so that a relay's repeat is dropped before it reaches a consumer.
    pub message_id: String,
    /// Where it goes: a NATS subject, an AMQP routing key.
    pub topic: String,
    /// The ordering key, if it has one.
    pub ordering_key: Option<String>,
    /// Its place among its ordering key's messages (0 without a key).
    pub seq: i64,
    /// The headers it was enqueued with, in order.
    pub headers: Vec<(String, String)>,
    /// The body.
    pub payload: Vec<u8>,
}

impl OutboxMessage {
    /// A message for `topic` with the id `message_id`, no ordering key and no headers: for
    /// trying a [`Publish`] implementation on its own (the relay builds its messages from the
    /// outbox's rows).
    pub fn new(
        message_id: impl Into<String>,
        topic: impl Into<String>,
        payload: impl Into<Vec<u8>>,
    ) -> Self {
        Self {
            message_id: message_id.into(),
            topic: topic.into(),
            ordering_key: None,
            seq: 0,
            headers: Vec::new(),
            payload: payload.into(),
        }
    }

    /// The headers as stored: one `name: value\r\n` line each.
    pub(crate) fn decode_headers(stored: Option<&[u8]>) -> Vec<(String, String)> {
        let Some(stored) = stored else {
            return Vec::new();
        };
        String::from_utf8_lossy(stored)
            .split("\r\n")
            .filter_map(|line| line.split_once(": "))
            .map(|(name, value)| (name.to_owned(), value.to_owned()))
            .collect()
    }
}

/// What the broker answered for one message it took.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum Confirmed {
    /// Stored.
    New,
    /// Recognised as a repeat of a message it already holds (a relay's repeat after a crash)
    /// and dropped.
    Duplicate,
}

/// Why the broker did not confirm one message: the relay leaves it pending and tries again.
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
pub struct PublishError(Box<dyn std::error::Error + Send + Sync>);

impl PublishError {
    /// Wraps the broker client's error.
    pub fn new(error: impl Into<Box<dyn std::error::Error + Send + Sync>>) -> Self {
        Self(error.into())
    }
}

/// A broker the relay publishes to, with confirmations.
///
/// Implemented by `guestlist-nats` (JetStream publish acks) and `guestlist-amqp` (RabbitMQ
/// publisher confirms). Implement it for another broker by sending the batch without waiting
/// between messages, in order, then awaiting the confirmations together.
pub trait Publish: Send + Sync {
    /// Publishes `messages` in order and waits for the broker to confirm them: one outcome per
    /// message, in the same order. A message counts as published only once confirmed, so a
    /// message whose fate is unknown (a timeout, a lost connection) is an error.
    fn publish(
        &self,
        messages: &[OutboxMessage],
    ) -> impl Future<Output = Vec<Result<Confirmed, PublishError>>> + Send;
}
