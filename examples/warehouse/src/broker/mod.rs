//! Where `OrderPaid` travels: a NATS JetStream stream or a RabbitMQ quorum queue, named by the
//! broker's URL (`nats://…` or `amqp://…`) and one name (`ORDERS`).
//!
//! The example declares what it needs, so that it runs on an empty broker: the stream `ORDERS`
//! on subject `orders.paid` with dead letters on `orders.dead` (stream `ORDERS_DEAD`), or the
//! quorum queue `ORDERS` with its dead letters in `ORDERS.dead`. The warehouse's own events,
//! `PickTaskCreated`, go on `orders.picked` (stream `ORDERS_PICKS`), or to the queue
//! `ORDERS.picks`.

use std::time::Duration;

use anyhow::Context as _;
use async_nats::jetstream;
use lapin::options::{
    BasicPublishOptions, ConfirmSelectOptions, QueueDeclareOptions, QueueDeleteOptions,
};
use lapin::types::{FieldTable, ShortString};
use lapin::{BasicProperties, Connection, ConnectionProperties};

use crate::warehouse::OrderPaid;

/// A stream or queue on one broker.
#[derive(Debug, Clone)]
pub struct Orders {
    /// `nats://…` or `amqp://…`.
    pub url: String,
    /// The stream's or queue's name.
    pub name: String,
}

impl Orders {
    /// The stream or queue `name` on the broker at `url`.
    pub fn new(url: impl Into<String>, name: impl Into<String>) -> Self {
        Self {
            url: url.into(),
            name: name.into(),
        }
    }

    /// `true` for NATS, `false` for RabbitMQ.
    pub fn is_nats(&self) -> bool {
        self.url.starts_with("nats")
    }

    /// The NATS subject events are published on.
    pub fn subject(&self) -> String {
        format!("{}.paid", self.name.to_lowercase())
    }

    /// Where the relay sends `OrderPaid`: the NATS subject, or the RabbitMQ queue (through the
    /// default exchange).
    pub fn paid_topic(&self) -> String {
        if self.is_nats() {
            self.subject()
        } else {
            self.name.clone()
        }
    }

    /// Where the relay sends `PickTaskCreated`: a NATS subject (stream `<NAME>_PICKS`), or a
    /// RabbitMQ queue.
    pub fn picks(&self) -> String {
        if self.is_nats() {
            format!("{}.picked", self.name.to_lowercase())
        } else {
            format!("{}.picks", self.name)
        }
    }

    /// The NATS stream that holds `PickTaskCreated`.
    pub fn picks_stream(&self) -> String {
        format!("{}_PICKS", self.name)
    }

    /// Where poison messages go: a NATS subject, or a RabbitMQ queue.
    pub fn dead_letters(&self) -> String {
        if self.is_nats() {
            format!("{}.dead", self.name.to_lowercase())
        } else {
            format!("{}.dead", self.name)
        }
    }

    /// Creates the stream (and its dead-letter stream) or the queue (and its dead-letter queue)
    /// where missing.
    pub async fn declare(&self) -> anyhow::Result<()> {
        if self.is_nats() {
            let context = self.nats().await?;
            for (name, subject) in [
                (self.name.clone(), self.subject()),
                (format!("{}_DEAD", self.name), self.dead_letters()),
                (self.picks_stream(), self.picks()),
            ] {
                let config = jetstream::stream::Config {
                    name: name.clone(),
                    subjects: vec![subject],
                    ..Default::default()
                };
                if let Err(err) = context.get_or_create_stream(config).await {
                    // Services that start together race to create it, and the losers are told
                    // its subjects overlap with a stream: the one the winner just made.
                    context
                        .get_stream(&name)
                        .await
                        .map_err(|_| err)
                        .with_context(|| format!("creating stream {name} on {}", self.url))?;
                }
            }
        } else {
            let (connection, channel) = self.amqp().await?;
            let queue = &self.name;
            guestlist::amqp::declare_quorum_queue(&channel, queue)
                .await
                .with_context(|| format!("declaring queue {queue} on the broker"))?;
            let durable = QueueDeclareOptions {
                durable: true,
                ..QueueDeclareOptions::default()
            };
            for queue in [self.dead_letters(), self.picks()] {
                channel
                    .queue_declare(
                        ShortString::from(queue.as_str()),
                        durable,
                        FieldTable::default(),
                    )
                    .await
                    .with_context(|| format!("declaring queue {queue} on the broker"))?;
            }
            connection.close(200, ShortString::from("declared")).await?;
        }
        Ok(())
    }

    /// Deletes what [`declare`](Self::declare) makes, where present, with what it holds.
    pub async fn remove(&self) -> anyhow::Result<()> {
        if self.is_nats() {
            let context = self.nats().await?;
            for stream in [
                self.name.clone(),
                format!("{}_DEAD", self.name),
                self.picks_stream(),
            ] {
                // Deleting a stream that is not there fails; that is what we want anyway.
                let _ = context.delete_stream(&stream).await;
            }
        } else {
            for queue in [self.name.clone(), self.dead_letters(), self.picks()] {
                // A failed delete closes its channel: one channel per queue.
                let (connection, channel) = self.amqp().await?;
                let _ = channel
                    .queue_delete(
                        ShortString::from(queue.as_str()),
                        QueueDeleteOptions::default(),
                    )
                    .await;
                let _ = connection.close(200, ShortString::from("removed")).await;
            }
        }
        Ok(())
    }

    /// Publishes `event` and waits for the broker to confirm it stored it.
    pub async fn publish(&self, event: &OrderPaid) -> anyhow::Result<()> {
        let payload = serde_json::to_vec(event)?;
        if self.is_nats() {
            // No Nats-Msg-Id: the server would drop a republished event itself, and the example
            // is about the duplicates that reach the consumer anyway (the id is in the payload).
            self.nats()
                .await?
                .publish(self.subject(), payload.into())
                .await?
                .await
                .context("the stream did not confirm the event")?;
        } else {
            let (connection, channel) = self.amqp().await?;
            channel
                .confirm_select(ConfirmSelectOptions::default())
                .await?;
            channel
                .basic_publish(
                    ShortString::from(""),
                    ShortString::from(self.name.as_str()),
                    BasicPublishOptions::default(),
                    &payload,
                    properties(event),
                )
                .await?
                .await
                .context("the queue did not confirm the event")?;
            connection
                .close(200, ShortString::from("published"))
                .await?;
        }
        Ok(())
    }

    /// The consumer's NATS source, with `ack_wait`: the durable consumer `warehouse`, created
    /// or bound when this returns.
    pub async fn nats_source(
        &self,
        ack_wait: Duration,
    ) -> anyhow::Result<guestlist::nats::JetStreamSource> {
        Ok(
            guestlist::nats::JetStreamSource::builder(&self.url, &self.name, "warehouse")
                .ack_wait(ack_wait)
                .dead_letter(&self.dead_letters())
                .connect()
                .await?,
        )
    }

    /// The consumer's RabbitMQ source, consuming the queue when this returns.
    pub async fn rabbit_source(&self) -> anyhow::Result<guestlist::amqp::RabbitSource> {
        Ok(
            guestlist::amqp::RabbitSource::builder(&self.url, &self.name)
                .dead_letter("", &self.dead_letters())
                .connect()
                .await?,
        )
    }

    async fn nats(&self) -> anyhow::Result<jetstream::Context> {
        let client = async_nats::connect(&self.url)
            .await
            .with_context(|| format!("connecting to NATS at {}", self.url))?;
        Ok(jetstream::new(client))
    }

    async fn amqp(&self) -> anyhow::Result<(Connection, lapin::Channel)> {
        let connection = Connection::connect(&self.url, ConnectionProperties::default())
            .await
            .context("connecting to RabbitMQ")?;
        let channel = connection.create_channel().await?;
        Ok((connection, channel))
    }
}

/// The AMQP properties of `event`: persistent, and its id (if it has one) as `message_id`.
fn properties(event: &OrderPaid) -> BasicProperties {
    let properties = match &event.id {
        Some(id) => guestlist::amqp::with_message_id(id),
        None => BasicProperties::default(),
    };
    properties.with_delivery_mode(2)
}
