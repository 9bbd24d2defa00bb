//! The consumer side: a RabbitMQ queue with manual acknowledgements, and the settings that
//! bind it.

use std::time::Duration;

use futures_util::{FutureExt, StreamExt};
use guestlist_consumer::{BoxError, Source};
use lapin::Channel;
use lapin::options::{
    BasicConsumeOptions, BasicQosOptions, ConfirmSelectOptions, QueueDeclareOptions,
};
use lapin::types::{FieldTable, ShortString};

use crate::delivery::{Unsettled, lock};
use crate::{Error, RabbitDelivery};

/// Deliveries from a RabbitMQ queue. When the connection fails (the broker restarted, the
/// network cut it), the next fetch connects again and consumes anew; the deliveries of the old
/// channel can no longer be acknowledged, and the broker delivers them again (duplicates, which
/// the inbox drops).
pub struct RabbitSource {
    settings: RabbitSourceBuilder,
    channel: Channel,
    consumer: lapin::Consumer,
    dead_letters: Option<(String, String)>,
    fetch_wait: Duration,
    unsettled: Unsettled,
}

impl std::fmt::Debug for RabbitSource {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RabbitSource")
            .field("dead_letters", &self.dead_letters)
            .finish_non_exhaustive()
    }
}

/// Settings for a [`RabbitSource`]; [`connect`](Self::connect) starts consuming.
#[derive(Debug, Clone)]
#[must_use]
pub struct RabbitSourceBuilder {
    url: String,
    queue: String,
    prefetch: u16,
    dead_letters: Option<(String, String)>,
    fetch_wait: Duration,
}

impl RabbitSource {
    /// Settings for a consumer of `queue` on the broker at `url`.
    ///
    /// ```no_run
    /// # async fn run() -> Result<(), guestlist_amqp::Error> {
    /// let source = guestlist_amqp::RabbitSource::builder("amqp://guest:guest@127.0.0.1:5672/%2f", "ORDERS")
    ///     .dead_letter("", "ORDERS.dead")
    ///     .connect()
    ///     .await?;
    /// # let _ = source; Ok(()) }
    /// ```
    pub fn builder(url: &str, queue: &str) -> RabbitSourceBuilder {
        RabbitSourceBuilder {
            url: url.to_owned(),
            queue: queue.to_owned(),
            prefetch: 200,
            dead_letters: None,
            fetch_wait: Duration::from_millis(250),
        }
    }

    /// Connects again after the connection failed, and consumes anew. Delivery tags count
    /// per channel, so the set of unsettled ones starts empty.
    async fn reconnect(&mut self) -> Result<(), Error> {
        let (channel, consumer) = self.settings.consume().await?;
        self.channel = channel;
        self.consumer = consumer;
        self.unsettled = Unsettled::default();
        tracing::info!(queue = %self.settings.queue, "connected to RabbitMQ again; consuming anew");
        Ok(())
    }

    fn delivery(&self, delivery: lapin::message::Delivery) -> RabbitDelivery {
        lock(&self.unsettled).insert(delivery.delivery_tag);
        RabbitDelivery {
            delivery,
            channel: self.channel.clone(),
            dead_letters: self.dead_letters.clone(),
            unsettled: std::sync::Arc::clone(&self.unsettled),
            queue: self.settings.queue.as_str().into(),
        }
    }
}

impl RabbitSourceBuilder {
    /// The most unacknowledged deliveries the broker hands this consumer at once (default
    /// 200). Make it twice the consumer's batch size, so that the next batch arrives while one
    /// commits.
    pub fn prefetch(mut self, deliveries: u16) -> Self {
        self.prefetch = deliveries;
        self
    }

    /// Publishes poison messages to `exchange` with `routing_key`, with their error in a
    /// `guestlist-error` header, then acknowledges them. Without it a poison message is
    /// rejected without requeue: to the queue's own dead-letter exchange if it has one,
    /// dropped otherwise.
    pub fn dead_letter(mut self, exchange: &str, routing_key: &str) -> Self {
        self.dead_letters = Some((exchange.to_owned(), routing_key.to_owned()));
        self
    }

    /// How long a fetch waits for a first delivery when none has arrived, before it returns
    /// empty (default 250 ms).
    pub fn fetch_wait(mut self, wait: Duration) -> Self {
        self.fetch_wait = wait;
        self
    }

    /// Connects and consumes the queue; refuses a queue that does not exist.
    pub async fn connect(self) -> Result<RabbitSource, Error> {
        let (channel, consumer) = self.consume().await?;
        Ok(RabbitSource {
            dead_letters: self.dead_letters.clone(),
            fetch_wait: self.fetch_wait,
            settings: self,
            channel,
            consumer,
            unsettled: Unsettled::default(),
        })
    }

    /// A connection, its channel, and the queue consumed on it.
    async fn consume(&self) -> Result<(Channel, lapin::Consumer), Error> {
        let queue = self.queue.as_str();
        let connection = crate::connect(&self.url).await?;
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
            .basic_qos(self.prefetch, BasicQosOptions::default())
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
        Ok((channel, consumer))
    }
}

impl Source for RabbitSource {
    type Delivery = RabbitDelivery;

    async fn fetch(&mut self, max: usize) -> Result<Vec<RabbitDelivery>, BoxError> {
        if !self.channel.status().connected() {
            self.reconnect().await?;
        }
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
