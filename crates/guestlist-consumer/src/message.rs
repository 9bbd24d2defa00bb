//! What a handler sees of a message.

use std::any::Any;
use std::fmt;
use std::sync::Arc;

use guestlist_core::{HandlerName, MessageId};

use crate::Delivery;

/// A message handed to the handler: the id the inbox claimed, the payload as received, and
/// what the broker says about it, in one shape whatever the broker.
///
/// | field | NATS JetStream | RabbitMQ | Kafka | SQS |
/// |---|---|---|---|---|
/// | [`headers`](Self::headers) | headers | headers (text and numbers) | headers | message attributes (SNS's, unwrapped) |
/// | [`key`](Self::key) | — | — | record key | FIFO `MessageGroupId` |
/// | [`topic`](Self::topic) | subject | routing key | topic | — |
///
/// The broker's own details (a Kafka record's partition and offset, an SQS message's receive
/// count and group, a NATS subject) are on the adapter's delivery type, reached with
/// [`Message::delivery`].
///
/// ```
/// use guestlist_consumer::Message;
/// use guestlist_core::MessageId;
///
/// let message = Message::new(MessageId::new("evt_1")?, b"{}".to_vec())
///     .with_header("seq", "7")
///     .with_key("order-42");
/// assert_eq!(message.header("seq"), Some("7"));
/// assert_eq!(message.key.as_deref(), Some("order-42"));
/// # Ok::<(), guestlist_core::Error>(())
/// ```
#[derive(Clone)]
#[non_exhaustive]
pub struct Message {
    /// The id the inbox claimed.
    pub id: MessageId,
    /// The payload, exactly as received.
    pub payload: Vec<u8>,
    /// How many times it has been delivered, this time included.
    pub delivery_count: u32,
    /// Every header the message carries, name and value, in the broker's order; a value that
    /// is not text is shown as text (a number in decimal, bytes decoded lossily as UTF-8).
    pub headers: Vec<(String, String)>,
    /// The broker's key of the message: a Kafka record's key, an SQS FIFO message's group id.
    pub key: Option<String>,
    /// Where it was published: a NATS subject, an AMQP routing key, a Kafka topic.
    pub topic: Option<String>,
    /// The adapter's delivery, for the broker's own details.
    delivery: Option<Arc<dyn Any + Send + Sync>>,
    /// The span of its processing, ended once the last copy of the message is dropped.
    span: tracing::Span,
}

impl Message {
    /// A message with `id` and `payload`, delivered once, with no headers: for tests of a
    /// handler.
    pub fn new(id: MessageId, payload: Vec<u8>) -> Self {
        Self {
            id,
            payload,
            delivery_count: 1,
            headers: Vec::new(),
            key: None,
            topic: None,
            delivery: None,
            span: tracing::Span::none(),
        }
    }

    /// This message with the header `name: value` added.
    pub fn with_header(mut self, name: &str, value: &str) -> Self {
        self.headers.push((name.to_owned(), value.to_owned()));
        self
    }

    /// This message with the broker key `key`.
    pub fn with_key(mut self, key: &str) -> Self {
        self.key = Some(key.to_owned());
        self
    }

    /// The value of the first header called `name` (exactly: header names are case-sensitive on
    /// NATS, RabbitMQ, Kafka and SQS alike).
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(n, _)| n == name)
            .map(|(_, value)| value.as_str())
    }

    /// The broker adapter's delivery this message came in, as its own type
    /// (`guestlist_kafka::KafkaDelivery`, `guestlist_sqs::SqsDelivery`, …), for what only that
    /// broker knows: a Kafka record's partition and offset, an SQS message's group. `None` for
    /// another type, and for a message built with [`Message::new`]. A `Message` holds its
    /// delivery: copy out what you need rather than keep the message past the handler (a Kafka
    /// record dropped unsettled is read again only once its last holder lets go of it).
    ///
    /// ```no_run
    /// # fn pick(message: &guestlist_consumer::Message) {
    /// # struct KafkaDelivery; impl KafkaDelivery { fn offset(&self) -> i64 { 0 } }
    /// if let Some(record) = message.delivery::<KafkaDelivery>() {
    ///     println!("offset {}", record.offset());
    /// }
    /// # }
    /// ```
    pub fn delivery<D: Any>(&self) -> Option<&D> {
        self.delivery.as_deref()?.downcast_ref::<D>()
    }

    /// The message of `delivery`, claimed as `id` for `handler`, with the span of its
    /// processing: the child of the context its headers carry (the relay's send), in
    /// OpenTelemetry's messaging conventions.
    pub(crate) fn of<D: Delivery>(id: MessageId, delivery: &Arc<D>, handler: &HandlerName) -> Self {
        let headers = delivery.headers();
        let topic = delivery.topic();
        let span = tracing::info_span!(
            "guestlist.consumer.process",
            otel.name = format!("process {}", topic.as_deref().unwrap_or(handler.as_str())),
            otel.kind = "consumer",
            messaging.operation.type = "process",
            messaging.destination.name = topic.as_deref(),
            messaging.message.id = id.as_str(),
            messaging.consumer.group.name = handler.as_str(),
            guestlist.handler = handler.as_str(),
            guestlist.delivery_count = delivery.delivery_count(),
            guestlist.outcome = tracing::field::Empty,
        );
        guestlist_core::trace_context::adopt_from(&span, &headers);
        Self {
            id,
            payload: delivery.payload().to_vec(),
            delivery_count: delivery.delivery_count(),
            headers,
            key: delivery.key(),
            topic,
            delivery: Some(Arc::clone(delivery) as Arc<dyn Any + Send + Sync>),
            span,
        }
    }

    /// The span of its processing, for the handler's run to be instrumented with.
    pub(crate) fn span(&self) -> &tracing::Span {
        &self.span
    }

    /// A span for one run of the handler on it, the child of its processing's span (beside the
    /// inbox's claim and before the commit and the acknowledgement, which the processing's span
    /// covers): what the handler does, outbound calls with their carried keys among it, nests
    /// under it.
    pub(crate) fn handler_span(&self) -> tracing::Span {
        tracing::info_span!(
            parent: &self.span,
            "guestlist.consumer.handler",
            otel.name = "handler",
        )
    }

    /// Records how its processing ended on its span: fresh, duplicate, deferred, failed,
    /// poison, withdrawn or outage.
    pub(crate) fn outcome(&self, outcome: &'static str) {
        self.span.record("guestlist.outcome", outcome);
    }
}

impl fmt::Debug for Message {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Message")
            .field("id", &self.id)
            .field("payload", &format_args!("{} bytes", self.payload.len()))
            .field("delivery_count", &self.delivery_count)
            .field("headers", &self.headers)
            .field("key", &self.key)
            .field("topic", &self.topic)
            .finish_non_exhaustive()
    }
}
