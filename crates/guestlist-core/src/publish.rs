//! What a relay hands a broker, and what the broker answers.

use std::future::Future;

use crate::{BoxError, FailureKind};

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
    /// The outbox shard it belongs to (0 outside a relay).
    pub shard: u32,
    /// The fencing token of the shard's lease the relay publishes it under (0 outside a
    /// relay): each take of a shard raises it, so a repeat sent by a relay that has since lost
    /// the shard carries a lower token than its successor's. A publisher may pass it on for
    /// tracing.
    pub token: i64,
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
            shard: 0,
            token: 0,
        }
    }

    /// Headers as the outbox stores them ([`crate::header_lines`]), read as text (bytes that are
    /// no UTF-8 become U+FFFD).
    pub fn decode_headers(stored: Option<&[u8]>) -> Vec<(String, String)> {
        crate::header_lines::decode(stored.unwrap_or_default())
            .into_iter()
            .map(|(name, value)| (name, String::from_utf8_lossy(&value).into_owned()))
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

/// Why the broker did not confirm one message, and which [`FailureKind`] that is: the relay
/// treats each kind its own way.
///
/// - [`PublishError::new`]: the broker refused this message ([`FailureKind::Poison`]): no queue
///   or stream takes its topic, a negative confirm. Counted against the message; its ordering
///   key waits, backing off, while the rest flow; at the relay's
///   `max_attempts` (guestlist-sqlx's `Relay::max_attempts`) it moves to the outgoing dead letters.
/// - [`PublishError::unpublishable`]: the broker can never take it (too large, an id or key it
///   cannot carry): dead-lettered at once, never sent.
/// - [`PublishError::outage`]: the broker or the network is down, or the confirmation did not
///   come ([`FailureKind::Outage`]): nothing counted; the relay backs off as a whole and
///   resumes by itself.
#[derive(Debug, thiserror::Error)]
#[error("{error}")]
pub struct PublishError {
    error: BoxError,
    kind: FailureKind,
    permanent: bool,
}

impl PublishError {
    /// The broker refused this message: poison, counted against it.
    pub fn new(error: impl Into<BoxError>) -> Self {
        Self {
            error: error.into(),
            kind: FailureKind::Poison,
            permanent: false,
        }
    }

    /// The broker can never take this message: dead-lettered at once.
    pub fn unpublishable(error: impl Into<BoxError>) -> Self {
        Self {
            permanent: true,
            ..Self::new(error)
        }
    }

    /// The broker or the way to it is down: an outage, counted against no message.
    pub fn outage(error: impl Into<BoxError>) -> Self {
        Self {
            kind: FailureKind::Outage,
            ..Self::new(error)
        }
    }

    /// Which kind of failure this is.
    pub fn kind(&self) -> FailureKind {
        self.kind
    }

    /// `true` when the broker can never take the message ([`PublishError::unpublishable`]).
    pub fn is_permanent(&self) -> bool {
        self.permanent
    }
}

/// The outcomes of a batch, one per message, as the broker gives them: the relay keeps those
/// given before a round ran out of time, and stamps the confirmed ones; a message with no
/// outcome by then counts as unconfirmed.
#[derive(Debug, Default)]
pub struct Outcomes {
    list: Vec<Option<Result<Confirmed, PublishError>>>,
}

impl Outcomes {
    /// Room for `n` outcomes.
    pub fn with_capacity(n: usize) -> Self {
        Self {
            list: Vec::with_capacity(n),
        }
    }

    /// The outcome of the message after the last one given.
    pub fn push(&mut self, outcome: Result<Confirmed, PublishError>) {
        self.list.push(Some(outcome));
    }

    /// The outcome of the `n`th message of the batch (from 0), for a broker that confirms out
    /// of order.
    pub fn set(&mut self, n: usize, outcome: Result<Confirmed, PublishError>) {
        if self.list.len() <= n {
            self.list.resize_with(n + 1, || None);
        }
        self.list[n] = Some(outcome);
    }

    /// Outcomes given so far.
    pub fn len(&self) -> usize {
        self.list.iter().filter(|o| o.is_some()).count()
    }

    /// `true` before the first outcome.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The `n`th message's outcome, once given.
    pub fn get(&self, n: usize) -> Option<&Result<Confirmed, PublishError>> {
        self.list.get(n).and_then(Option::as_ref)
    }

    /// The outcomes of a batch of `n`, a message with none counted as unconfirmed: for
    /// calling a [`Publish`] on its own.
    pub fn into_results(self, n: usize) -> Vec<Result<Confirmed, PublishError>> {
        self.into_slots(n)
            .into_iter()
            .map(|slot| slot.unwrap_or_else(|| Err(PublishError::outage("no confirmation"))))
            .collect()
    }

    /// One entry per message of a batch of `n`: `None` where no outcome came (the relay's
    /// view, which tells a refusal from a confirmation that never arrived).
    pub fn into_slots(mut self, n: usize) -> Vec<Option<Result<Confirmed, PublishError>>> {
        self.list.resize_with(n, || None);
        self.list
    }
}

/// A broker the relay publishes to, with confirmations.
///
/// Implemented by `guestlist-nats` (JetStream publish acks), `guestlist-amqp` (RabbitMQ
/// publisher confirms), `guestlist-kafka` and `guestlist-sqs`. Implement it for another broker
/// by checking each message against the broker's limits ([`Publish::check`]), then sending the
/// batch without waiting between messages, in order, and pushing the confirmations as they
/// come.
pub trait Publish: Send + Sync {
    /// Whether the broker could ever take `message`: its size, its id, its ordering key and
    /// headers against the broker's limits. A message refused here
    /// ([`PublishError::unpublishable`]) is never sent: it goes to the outgoing dead letters
    /// with the reason, and its ordering key moves on. Every message passes by default.
    fn check(&self, message: &OutboxMessage) -> Result<(), PublishError> {
        let _ = message;
        Ok(())
    }

    /// Publishes `messages` in order and pushes one outcome per message onto `outcomes`, in
    /// the same order, as the broker confirms them. A message counts as published only once
    /// confirmed, so a message whose fate is unknown (a lost connection) is an error
    /// ([`PublishError::outage`]). The relay stops waiting at its confirm timeout and keeps
    /// the outcomes pushed by then.
    fn publish(
        &self,
        messages: &[OutboxMessage],
        outcomes: &mut Outcomes,
    ) -> impl Future<Output = ()> + Send;
}
