//! The outbox relay's publisher on RabbitMQ: pipelined publishes, one publisher confirm each.

use guestlist_sqlx::{Confirmed, OutboxMessage, Publish, PublishError};
use lapin::options::{BasicPublishOptions, ConfirmSelectOptions};
use lapin::types::{AMQPValue, FieldTable, LongString, ShortString};
use lapin::{BasicProperties, Channel, Confirmation};

use crate::Error;

/// Publishes the outbox's messages to RabbitMQ for a [`guestlist_sqlx::Relay`], with publisher
/// confirms.
///
/// Each message goes to the exchange given at connection (`""`, the default exchange, routes
/// to the queue named by the topic) with the topic as its routing key, persistent, with the
/// AMQP `message_id` property set to its id, so that consumers' inbox drops a relay's repeat
/// (`IdFrom::BrokerId`; RabbitMQ itself does not deduplicate). Its ordering key and place
/// travel as the headers `guestlist-ordering-key` and `guestlist-seq`, with the headers it was
/// enqueued with. Publishes are mandatory: a message no queue would receive comes back, and
/// stays pending with what to do. A batch is sent without waiting between messages; the
/// confirms are awaited together.
#[derive(Debug, Clone)]
pub struct RabbitPublisher {
    channel: Channel,
    exchange: String,
}

impl RabbitPublisher {
    /// A publisher on `channel`, which is put in confirm mode, to `exchange`.
    pub async fn new(channel: Channel, exchange: &str) -> Result<Self, Error> {
        channel
            .confirm_select(ConfirmSelectOptions::default())
            .await?;
        Ok(Self {
            channel,
            exchange: exchange.to_owned(),
        })
    }

    /// Connects to `url` and publishes to `exchange` (`""` for the default exchange).
    pub async fn connect(url: &str, exchange: &str) -> Result<Self, Error> {
        let connection = crate::connect(url).await?;
        Self::new(connection.create_channel().await?, exchange).await
    }

    fn properties(message: &OutboxMessage) -> BasicProperties {
        let mut headers = FieldTable::default();
        let text = |value: &str| AMQPValue::LongString(LongString::from(value.to_owned()));
        if let Some(key) = &message.ordering_key {
            headers.insert(ShortString::from("guestlist-ordering-key"), text(key));
            headers.insert(
                ShortString::from("guestlist-seq"),
                AMQPValue::LongLongInt(message.seq),
            );
        }
        for (name, value) in &message.headers {
            headers.insert(ShortString::from(name.as_str()), text(value));
        }
        BasicProperties::default()
            .with_message_id(ShortString::from(message.message_id.as_str()))
            .with_delivery_mode(2)
            .with_headers(headers)
    }

    fn confirmed(
        &self,
        message: &OutboxMessage,
        confirmation: Confirmation,
    ) -> Result<Confirmed, PublishError> {
        match confirmation {
            Confirmation::Ack(None) => Ok(Confirmed::New),
            Confirmation::Ack(Some(returned)) | Confirmation::Nack(Some(returned)) => {
                Err(PublishError::new(format!(
                    "RabbitMQ routed {} nowhere ({} {}): bind a queue to exchange '{}' \
                     with routing key '{}'",
                    message.message_id,
                    returned.reply_code,
                    returned.reply_text,
                    self.exchange,
                    message.topic
                )))
            }
            Confirmation::Nack(None) => Err(PublishError::new(format!(
                "RabbitMQ refused {} (a negative publisher confirm): check the broker's logs \
                 and limits",
                message.message_id
            ))),
            Confirmation::NotRequested => Err(PublishError::new(
                "publisher confirms are off on this channel: build the publisher with \
                 RabbitPublisher::new or connect",
            )),
        }
    }
}

impl Publish for RabbitPublisher {
    async fn publish(&self, messages: &[OutboxMessage]) -> Vec<Result<Confirmed, PublishError>> {
        let options = BasicPublishOptions {
            mandatory: true,
            ..BasicPublishOptions::default()
        };
        let mut pending = Vec::with_capacity(messages.len());
        for message in messages {
            let sent = self
                .channel
                .basic_publish(
                    ShortString::from(self.exchange.as_str()),
                    ShortString::from(message.topic.as_str()),
                    options,
                    &message.payload,
                    Self::properties(message),
                )
                .await;
            pending.push((message, sent));
        }
        let mut outcomes = Vec::with_capacity(pending.len());
        for (message, sent) in pending {
            let confirmation = match sent {
                Ok(confirm) => confirm.await,
                Err(err) => Err(err),
            };
            outcomes.push(match confirmation {
                Ok(confirmation) => self.confirmed(message, confirmation),
                Err(err) => Err(PublishError::new(err)),
            });
        }
        outcomes
    }
}
