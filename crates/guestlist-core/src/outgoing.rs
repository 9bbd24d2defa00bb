//! An outgoing message, as a producer enqueues it.

use crate::{MessageId, OrderingKey, Topic};

/// A message for the outbox: where it goes, what it says, and optionally its id, its ordering
/// key and headers.
///
/// ```
/// use guestlist_core::{MessageId, OrderingKey, Outgoing, Topic};
/// let paid = Outgoing::new(Topic::new("orders.paid")?, br#"{"order":42}"#.to_vec())
///     .id(MessageId::new("evt_order42_paid")?)
///     .ordering_key(OrderingKey::new("order-42")?)
///     .header("content-type", "application/json");
/// assert_eq!(paid.message_id().map(MessageId::as_str), Some("evt_order42_paid"));
/// # Ok::<(), guestlist_core::Error>(())
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Outgoing {
    pub(crate) topic: Topic,
    pub(crate) payload: Vec<u8>,
    pub(crate) id: Option<MessageId>,
    pub(crate) ordering_key: Option<OrderingKey>,
    pub(crate) headers: Vec<(String, String)>,
}

impl Outgoing {
    /// A message for `topic` carrying `payload`, with a new id given when it is enqueued.
    pub fn new(topic: Topic, payload: impl Into<Vec<u8>>) -> Self {
        Self {
            topic,
            payload: payload.into(),
            id: None,
            ordering_key: None,
            headers: Vec::new(),
        }
    }

    /// The message's id, for the brokers' deduplication and the consumers' inbox. Give one that
    /// is stable across retries of the producer's work (an event id derived from the business
    /// change): enqueueing an id that is already in the outbox enqueues nothing.
    pub fn id(mut self, id: MessageId) -> Self {
        self.id = Some(id);
        self
    }

    /// Publishes this message after every message with the same key whose transaction
    /// committed before this one's.
    pub fn ordering_key(mut self, key: OrderingKey) -> Self {
        self.ordering_key = Some(key);
        self
    }

    /// Adds a header the relay sends along (a NATS header, an AMQP header). Carriage returns
    /// and line feeds, which no broker's headers hold, become spaces.
    pub fn header(mut self, name: impl Into<String>, value: impl Into<String>) -> Self {
        let clean = |text: String| text.replace(['\r', '\n'], " ");
        self.headers.push((clean(name.into()), clean(value.into())));
        self
    }

    /// The id given with [`Outgoing::id`], if any.
    pub fn message_id(&self) -> Option<&MessageId> {
        self.id.as_ref()
    }

    /// Where it goes.
    pub fn topic(&self) -> &Topic {
        &self.topic
    }

    /// What it says.
    pub fn payload(&self) -> &[u8] {
        &self.payload
    }

    /// The key given with [`Outgoing::ordering_key`], if any.
    pub fn key(&self) -> Option<&OrderingKey> {
        self.ordering_key.as_ref()
    }

    /// The headers as the outbox stores them ([`crate::header_lines`]), with the current span's
    /// trace context ([`crate::trace_context`]) added unless the message carries a
    /// `traceparent` of its own; `None` when there are none.
    pub fn stored_headers(&self) -> Option<Vec<u8>> {
        let own = self
            .headers
            .iter()
            .any(|(name, _)| name.eq_ignore_ascii_case(crate::trace_context::TRACEPARENT));
        let traced = if own {
            Vec::new()
        } else {
            crate::trace_context::headers_of(&tracing::Span::current())
        };
        let headers = self
            .headers
            .iter()
            .map(|(name, value)| (name.as_str(), value.as_bytes()))
            .chain(
                traced
                    .iter()
                    .map(|(name, value)| (name.as_str(), value.as_bytes())),
            );
        let stored = crate::header_lines::encode(headers);
        (!stored.is_empty()).then_some(stored)
    }
}
