//! guestlist's consumer on RabbitMQ.
//!
//! [`RabbitSource`] consumes a queue with manual acknowledgements and a prefetch of one batch.
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
//! The guide tells the whole story, with each part's guarantees and failure tables: see
//! [broker consumers](https://github.com/guestlist-rs/guestlist/blob/main/docs/guide/src/consumers.md)
//! (or build it locally with `mdbook serve docs/guide`).

use std::time::Duration;

use futures_util::StreamExt;
use guestlist_consumer::{BrokerError, Delivery, Source};
use lapin::options::{
    BasicAckOptions, BasicConsumeOptions, BasicNackOptions, BasicPublishOptions, BasicQosOptions,
    BasicRejectOptions, ConfirmSelectOptions, QueueDeclareOptions,
};
use lapin::types::{AMQPValue, FieldTable, LongString, ShortString};
use lapin::{BasicProperties, Channel, Connection, ConnectionProperties};

/// A failure to set up the source, with what to do about it.
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
}

/// Deliveries from a RabbitMQ queue.
pub struct RabbitSource {
    channel: Channel,
    consumer: lapin::Consumer,
    dead_letters: Option<(String, String)>,
    fetch_wait: Duration,
}

impl std::fmt::Debug for RabbitSource {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RabbitSource")
            .field("dead_letters", &self.dead_letters)
            .finish_non_exhaustive()
    }
}

impl RabbitSource {
    /// Connects to `url` and consumes `queue`, which must exist, holding at most `prefetch`
    /// unacknowledged deliveries (set it to the consumer's batch size or more).
    pub async fn connect(url: &str, queue: &str, prefetch: u16) -> Result<Self, Error> {
        let connection = Connection::connect(url, ConnectionProperties::default())
            .await
            .map_err(|source| Error::Connect {
                url: url.split('@').next_back().unwrap_or(url).to_owned(),
                source,
            })?;
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
        })
    }

    /// Publishes dead letters to `exchange` with `routing_key`, carrying their error.
    pub fn dead_letter_to(mut self, exchange: &str, routing_key: &str) -> Self {
        self.dead_letters = Some((exchange.to_owned(), routing_key.to_owned()));
        self
    }
}

impl Source for RabbitSource {
    type Delivery = RabbitDelivery;

    async fn fetch(&mut self, max: usize) -> Result<Vec<RabbitDelivery>, BrokerError> {
        let mut deliveries = Vec::with_capacity(max);
        let deadline = tokio::time::Instant::now() + self.fetch_wait;
        while deliveries.len() < max {
            // The first delivery may wait; the rest of a batch is whatever has already arrived.
            let wait = if deliveries.is_empty() {
                deadline.saturating_duration_since(tokio::time::Instant::now())
            } else {
                Duration::from_millis(2)
            };
            match tokio::time::timeout(wait, self.consumer.next()).await {
                Ok(Some(delivery)) => deliveries.push(RabbitDelivery {
                    delivery: delivery?,
                    channel: self.channel.clone(),
                    dead_letters: self.dead_letters.clone(),
                }),
                Ok(None) => return Err("the RabbitMQ consumer was cancelled".into()),
                Err(_) => break,
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

/// Where RabbitMQ puts a message id too long for the `message_id` property.
const LONG_MESSAGE_ID: &str = "x-message-id";

/// One RabbitMQ delivery.
pub struct RabbitDelivery {
    delivery: lapin::message::Delivery,
    channel: Channel,
    dead_letters: Option<(String, String)>,
}

impl RabbitDelivery {
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

    async fn ack(&self) -> Result<(), BrokerError> {
        self.delivery.acker.ack(BasicAckOptions::default()).await?;
        Ok(())
    }

    async fn nak(&self, delay: Duration) -> Result<(), BrokerError> {
        // RabbitMQ has no delayed NAK: hold the message for the delay, then requeue it.
        let acker = self.delivery.acker.clone();
        tokio::spawn(async move {
            tokio::time::sleep(delay).await;
            if let Err(err) = acker
                .nack(BasicNackOptions {
                    requeue: true,
                    ..BasicNackOptions::default()
                })
                .await
            {
                tracing::warn!(error = %err, "cannot requeue a message; RabbitMQ redelivers it when the channel closes");
            }
        });
        Ok(())
    }

    async fn dead_letter(&self, reason: &str) -> Result<(), BrokerError> {
        let Some((exchange, routing_key)) = &self.dead_letters else {
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
        self.delivery.acker.ack(BasicAckOptions::default()).await?;
        Ok(())
    }

    async fn keep_alive(&self) -> Result<(), BrokerError> {
        Ok(()) // no per-delivery deadline to extend
    }
}

/// Properties for a message published with `message_id`.
pub fn with_message_id(message_id: &str) -> BasicProperties {
    BasicProperties::default().with_message_id(ShortString::from(message_id))
}
