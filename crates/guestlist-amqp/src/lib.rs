//! guestlist's consumer on RabbitMQ.
//!
//! [`RabbitSource`] consumes a queue with manual acknowledgements and a prefetch window (make it
//! two batches, so that the next batch flows while one commits). A fetch takes the deliveries
//! that have arrived, up to the batch limit, and waits only while none has. A committed batch is
//! acknowledged with one `basic.ack` with `multiple` where no other delivery below it is still
//! unsettled (one by one otherwise).
//! Use a **quorum queue**: it counts deliveries (`x-delivery-count`), which guestlist needs to
//! tell a poison message from a new one. A NAK with backoff holds the message for the delay, then
//! requeues it. Dead letters are published, with the error in a `guestlist-error` header, to the
//! dead-letter exchange you name (then the original is acknowledged); without one, the message is
//! rejected without requeue, to the queue's own dead-letter exchange if it has one.
//!
//! `IdFrom::BrokerId` reads the AMQP `message_id` property: what any client sets as the
//! message's id (pika's `BasicProperties(message_id=…)`, amqplib's `messageId`, the Java
//! client's `messageId(…)`), so publishers in other languages need no id in the body.
//!
//! [`RabbitPublisher`] is the other direction: the outbox relay's publisher, with publisher
//! confirms and the `message_id` property set.
//!
//! The guide tells the whole story, with each part's guarantees and failure tables: see
//! [broker consumers](https://github.com/guestlist-rs/guestlist/blob/main/docs/guide/src/consumers.md)
//! (or build it locally with `mdbook serve docs/guide`).

use std::collections::BTreeSet;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use futures_util::{FutureExt, StreamExt};
use guestlist_consumer::{BoxError, Delivery, Source};
use lapin::options::{
    BasicAckOptions, BasicConsumeOptions, BasicNackOptions, BasicPublishOptions, BasicQosOptions,
    BasicRejectOptions, ConfirmSelectOptions, QueueDeclareOptions,
};
use lapin::types::{AMQPValue, FieldTable, LongString, ShortString};
use lapin::{BasicProperties, Channel, Connection, ConnectionProperties};

mod publisher;

pub use publisher::RabbitPublisher;

/// A failure to set up the source or the publisher, with what to do about it.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// RabbitMQ could not be reached.
    #[error(
        "cannot connect to RabbitMQ at {url}: {source} — check that it runs and the credentials are right"
    )]
    Connect {
        /// The URL tried (without its password).
        url: String,
        /// lapin's error.
        source: lapin::Error,
    },
    /// The queue does not exist.
    #[error(
        "RabbitMQ queue {queue} does not exist: declare it first (a quorum queue, so that deliveries are counted)"
    )]
    MissingQueue {
        /// The queue looked for.
        queue: String,
    },
    /// RabbitMQ refused or failed.
    #[error("RabbitMQ error: {0}")]
    Amqp(#[from] lapin::Error),
    /// A setting RabbitMQ cannot take; the text says which and why.
    #[error("{0}")]
    Config(String),
}

/// A connection to RabbitMQ at `url`; an error names the host, not the credentials.
async fn connect(url: &str) -> Result<Connection, Error> {
    Connection::connect(url, ConnectionProperties::default())
        .await
        .map_err(|source| Error::Connect {
            url: url.split('@').next_back().unwrap_or(url).to_owned(),
            source,
        })
}

/// Deliveries from a RabbitMQ queue.
pub struct RabbitSource {
    channel: Channel,
    consumer: lapin::Consumer,
    dead_letters: Option<(String, String)>,
    fetch_wait: Duration,
    unsettled: Unsettled,
}

/// The delivery tags this channel has handed out and not yet acknowledged, handed back or
/// rejected: a `multiple` acknowledgement must not settle one of them by accident.
type Unsettled = Arc<Mutex<BTreeSet<u64>>>;

impl std::fmt::Debug for RabbitSource {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RabbitSource")
            .field("dead_letters", &self.dead_letters)
            .finish_non_exhaustive()
    }
}

impl RabbitSource {
    /// Connects to `url` and consumes `queue`, which must exist, holding at most `prefetch`
    /// unacknowledged deliveries. Make it twice the consumer's batch size (200 for the default
    /// 100), so that the next batch arrives while one commits.
    pub async fn connect(url: &str, queue: &str, prefetch: u16) -> Result<Self, Error> {
        let connection = connect(url).await?;
        let channel = connection.create_channel().await?;
        channel
            .queue_declare(
                ShortString::from(queue),
                QueueDeclareOptions {
                    passive: true,
                    ..QueueDeclareOptions::default()
                },
                FieldTable::default(),
            )
            .await
            .map_err(|_| Error::MissingQueue {
                queue: queue.to_owned(),
            })?;
        let channel = connection.create_channel().await?; // a failed passive declare closes its channel
        channel
            .basic_qos(prefetch, BasicQosOptions::default())
            .await?;
        channel
            .confirm_select(ConfirmSelectOptions::default())
            .await?;
        let consumer = channel
            .basic_consume(
                ShortString::from(queue),
                ShortString::from(""),
                BasicConsumeOptions::default(),
                FieldTable::default(),
            )
            .await?;
        Ok(Self {
            channel,
            consumer,
            dead_letters: None,
            fetch_wait: Duration::from_millis(250),
            unsettled: Unsettled::default(),
        })
    }

    fn delivery(&self, delivery: lapin::message::Delivery) -> RabbitDelivery {
        lock(&self.unsettled).insert(delivery.delivery_tag);
        RabbitDelivery {
            delivery,
            channel: self.channel.clone(),
            dead_letters: self.dead_letters.clone(),
            unsettled: Arc::clone(&self.unsettled),
        }
    }

    /// Publishes dead letters to `exchange` with `routing_key`, carrying their error.
    pub fn dead_letter_to(mut self, exchange: &str, routing_key: &str) -> Self {
        self.dead_letters = Some((exchange.to_owned(), routing_key.to_owned()));
        self
    }
}

impl Source for RabbitSource {
    type Delivery = RabbitDelivery;

    async fn fetch(&mut self, max: usize) -> Result<Vec<RabbitDelivery>, BoxError> {
        // The first delivery may wait; the rest of a batch is whatever has already arrived.
        let first = match tokio::time::timeout(self.fetch_wait, self.consumer.next()).await {
            Ok(Some(first)) => self.delivery(first?),
            Ok(None) => return Err(CANCELLED.into()),
            Err(_) => return Ok(Vec::new()),
        };
        let mut deliveries = vec![first];
        deliveries.extend(self.fetch_ready(max.saturating_sub(1)).await?);
        Ok(deliveries)
    }

    async fn fetch_ready(&mut self, max: usize) -> Result<Vec<RabbitDelivery>, BoxError> {
        let mut deliveries = Vec::with_capacity(max);
        while deliveries.len() < max {
            match self.consumer.next().now_or_never() {
                Some(Some(delivery)) => deliveries.push(self.delivery(delivery?)),
                Some(None) => return Err(CANCELLED.into()),
                None => break, // nothing more has arrived
            }
        }
        Ok(deliveries)
    }

    fn ack_wait(&self) -> Option<Duration> {
        None // RabbitMQ redelivers only when the channel closes (or after consumer_timeout)
    }

    fn redelivery_horizon(&self) -> Option<Duration> {
        None // redeliveries are not bounded in time
    }
}

/// The error of a fetch from a consumer RabbitMQ cancelled.
const CANCELLED: &str = "the RabbitMQ consumer was cancelled";

/// Where RabbitMQ puts a message id too long for the `message_id` property.
const LONG_MESSAGE_ID: &str = "x-message-id";

/// A header value as text: strings as they are, numbers and booleans written out; tables,
/// arrays and the rest left out.
fn text_of(value: &AMQPValue) -> Option<String> {
    Some(match value {
        AMQPValue::LongString(s) => String::from_utf8_lossy(s.as_bytes()).into_owned(),
        AMQPValue::ShortString(s) => s.to_string(),
        AMQPValue::Boolean(b) => b.to_string(),
        AMQPValue::ShortShortInt(n) => n.to_string(),
        AMQPValue::ShortShortUInt(n) => n.to_string(),
        AMQPValue::ShortInt(n) => n.to_string(),
        AMQPValue::ShortUInt(n) => n.to_string(),
        AMQPValue::LongInt(n) => n.to_string(),
        AMQPValue::LongUInt(n) => n.to_string(),
        AMQPValue::LongLongInt(n) => n.to_string(),
        AMQPValue::Timestamp(n) => n.to_string(),
        AMQPValue::Float(n) => n.to_string(),
        AMQPValue::Double(n) => n.to_string(),
        AMQPValue::ByteArray(bytes) => String::from_utf8_lossy(bytes.as_slice()).into_owned(),
        _ => return None,
    })
}

/// One RabbitMQ delivery. A handler reaches it with
/// [`Message::delivery`](guestlist_consumer::Message::delivery), for the AMQP delivery itself
/// ([`RabbitDelivery::delivery`]: exchange, routing key, properties).
pub struct RabbitDelivery {
    delivery: lapin::message::Delivery,
    channel: Channel,
    dead_letters: Option<(String, String)>,
    unsettled: Unsettled,
}

/// The set, even if a thread panicked while holding it (a set of integers stays whole).
fn lock(unsettled: &Unsettled) -> std::sync::MutexGuard<'_, BTreeSet<u64>> {
    unsettled.lock().unwrap_or_else(PoisonError::into_inner)
}

impl RabbitDelivery {
    /// The AMQP delivery as received: its exchange, routing key, redelivered flag and
    /// properties.
    pub fn delivery(&self) -> &lapin::message::Delivery {
        &self.delivery
    }

    /// Marks this delivery settled: acknowledged, handed back or rejected.
    fn settled(&self) {
        lock(&self.unsettled).remove(&self.delivery.delivery_tag);
    }

    fn header_value(&self, name: &str) -> Option<&AMQPValue> {
        self.delivery
            .properties
            .headers()
            .as_ref()?
            .inner()
            .get(name)
    }
}

impl Delivery for RabbitDelivery {
    fn payload(&self) -> &[u8] {
        &self.delivery.data
    }

    fn header(&self, name: &str) -> Option<&str> {
        match self.header_value(name)? {
            AMQPValue::LongString(s) => std::str::from_utf8(s.as_bytes()).ok(),
            AMQPValue::ShortString(s) => Some(s.as_str()),
            _ => None,
        }
    }

    fn headers(&self) -> Vec<(String, String)> {
        let Some(headers) = self.delivery.properties.headers().as_ref() else {
            return Vec::new();
        };
        headers
            .inner()
            .iter()
            .filter_map(|(name, value)| Some((name.to_string(), text_of(value)?)))
            .collect()
    }

    fn topic(&self) -> Option<String> {
        Some(self.delivery.routing_key.to_string())
    }

    fn broker_id(&self) -> Option<&str> {
        // The `message_id` property is a short string (at most 255 bytes). RabbitMQ hands an
        // AMQP 1.0 publisher's longer message-id to AMQP 0-9-1 consumers in the `x-message-id`
        // header instead: read it there, so that the id is refused for its length (and says
        // so) rather than reported missing.
        match self.delivery.properties.message_id() {
            Some(id) => Some(id.as_str()),
            None => self.header(LONG_MESSAGE_ID),
        }
    }

    fn delivery_count(&self) -> u32 {
        // Quorum queues count earlier deliveries in x-delivery-count; classic queues only say
        // "redelivered".
        match self.header_value("x-delivery-count") {
            Some(AMQPValue::LongLongInt(n)) => u32::try_from(*n).unwrap_or(u32::MAX - 1) + 1,
            Some(AMQPValue::LongInt(n)) => u32::try_from(*n).unwrap_or(u32::MAX - 1) + 1,
            _ if self.delivery.redelivered => 2,
            _ => 1,
        }
    }

    async fn ack(&self) -> Result<(), BoxError> {
        self.settled();
        self.delivery.acker.ack(BasicAckOptions::default()).await?;
        Ok(())
    }

    async fn ack_all(deliveries: &[&Self]) -> Result<(), BoxError> {
        let Some(last) = deliveries.iter().max_by_key(|d| d.delivery.delivery_tag) else {
            return Ok(());
        };
        let tags: BTreeSet<u64> = deliveries.iter().map(|d| d.delivery.delivery_tag).collect();
        let at_once = {
            let mut unsettled = lock(&last.unsettled);
            // Every delivery still unsettled up to the last one is in this batch: one
            // `multiple` ack settles exactly the batch. A message held back for a delayed
            // requeue, below it, would be settled by mistake: then one by one.
            let at_once = unsettled
                .range(..=last.delivery.delivery_tag)
                .all(|tag| tags.contains(tag));
            if at_once {
                unsettled.retain(|tag| !tags.contains(tag));
            }
            at_once
        };
        if at_once {
            last.delivery
                .acker
                .ack(BasicAckOptions { multiple: true })
                .await?;
            return Ok(());
        }
        for delivery in deliveries {
            delivery.ack().await?;
        }
        Ok(())
    }

    async fn nak(&self, delay: Duration) -> Result<(), BoxError> {
        // RabbitMQ has no delayed NAK: hold the message for the delay, then requeue it. It
        // stays unsettled meanwhile, so that no `multiple` ack settles it.
        let acker = self.delivery.acker.clone();
        let (unsettled, tag) = (Arc::clone(&self.unsettled), self.delivery.delivery_tag);
        tokio::spawn(async move {
            tokio::time::sleep(delay).await;
            let requeued = acker
                .nack(BasicNackOptions {
                    requeue: true,
                    ..BasicNackOptions::default()
                })
                .await;
            // Only once its NACK is on the wire: a `multiple` ack sent before it would settle
            // this message, and the NACK would then name a tag the channel no longer knows.
            lock(&unsettled).remove(&tag);
            if let Err(err) = requeued {
                tracing::warn!(error = %err, "cannot requeue a message; RabbitMQ redelivers it when the channel closes");
            }
        });
        Ok(())
    }

    async fn dead_letter(&self, reason: &str) -> Result<(), BoxError> {
        let Some((exchange, routing_key)) = &self.dead_letters else {
            self.settled();
            self.delivery
                .acker
                .reject(BasicRejectOptions { requeue: false })
                .await?;
            return Ok(());
        };
        let mut headers = self
            .delivery
            .properties
            .headers()
            .clone()
            .unwrap_or_default();
        headers.insert(
            ShortString::from("guestlist-error"),
            AMQPValue::LongString(LongString::from(reason.to_owned())),
        );
        let properties = self.delivery.properties.clone().with_headers(headers);
        // Stored in the dead-letter place first (publisher confirm), then removed here.
        self.channel
            .basic_publish(
                ShortString::from(exchange.as_str()),
                ShortString::from(routing_key.as_str()),
                BasicPublishOptions::default(),
                &self.delivery.data,
                properties,
            )
            .await?
            .await?;
        self.settled();
        self.delivery.acker.ack(BasicAckOptions::default()).await?;
        Ok(())
    }

    async fn keep_alive(&self) -> Result<(), BoxError> {
        Ok(()) // no per-delivery deadline to extend
    }
}

/// Properties for a message published with `message_id`.
pub fn with_message_id(message_id: &str) -> BasicProperties {
    BasicProperties::default().with_message_id(ShortString::from(message_id))
}
