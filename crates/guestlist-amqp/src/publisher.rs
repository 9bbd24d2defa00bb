//! The outbox relay's publisher on RabbitMQ: pipelined publishes, one publisher confirm each.

use std::sync::Arc;

use guestlist_core::{Confirmed, OutboxMessage, Outcomes, Publish, PublishError};
use lapin::options::{BasicPublishOptions, ConfirmSelectOptions};
use lapin::types::{AMQPValue, FieldTable, LongString, ShortString};
use lapin::{BasicProperties, Channel};

use crate::Error;
use crate::returns::{Confirms, Verdict};

/// Publishes the outbox's messages to RabbitMQ for the outbox's relay (`guestlist_sqlx::Relay`),
/// with publisher confirms.
///
/// Each message goes to the exchange given at connection (`""`, the default exchange, routes
/// to the queue named by the topic) with the topic as its routing key, persistent, with the
/// AMQP `message_id` property set to its id, so that consumers' inbox drops a relay's repeat
/// (`IdFrom::BrokerId`; RabbitMQ itself does not deduplicate). Its ordering key and place
/// travel as the headers `guestlist-ordering-key` and `guestlist-seq`, with the headers it was
/// enqueued with. Publishes are mandatory: a message no queue would receive comes back, and
/// is counted against it and retried, then dead-lettered by the relay. A batch is sent without
/// waiting between messages; the confirms are awaited together. Before sending, each message
/// is checked against what AMQP and the broker can carry ([`Publish::check`]: 255-byte short
/// strings, the negotiated frame size, [`max_message_size`](RabbitPublisherBuilder::max_message_size)).
///
/// lapin logs each message RabbitMQ returns at WARN, with its headers and its body: filter
/// `lapin=error` in your subscriber (`guestlist relay` does unless told otherwise), since bodies
/// can hold secrets.
///
/// When the connection fails (the broker restarted, the network cut it), the next batch
/// connects again; the batch in flight meanwhile is an outage, and goes again.
#[derive(Debug, Clone)]
pub struct RabbitPublisher {
    /// The channel in confirm mode, replaced by a new connection's when the old one failed.
    channel: Arc<tokio::sync::Mutex<Channel>>,
    url: String,
    exchange: String,
    frame_max: u32,
    max_message_size: usize,
}

/// The frame size RabbitMQ negotiates unless configured otherwise.
const DEFAULT_FRAME_MAX: u32 = 131_072;
/// RabbitMQ 4's `max_message_size` unless configured otherwise.
const DEFAULT_MAX_MESSAGE_SIZE: usize = 16 * 1024 * 1024;
/// The longest AMQP short string: message ids, routing keys, header names.
const MAX_SHORT_STRING: usize = 255;

/// Settings for a [`RabbitPublisher`]; [`connect`](Self::connect) opens its channel.
#[derive(Debug, Clone)]
#[must_use]
pub struct RabbitPublisherBuilder {
    url: String,
    exchange: String,
    max_message_size: usize,
}

impl RabbitPublisher {
    /// Settings for a publisher to the broker at `url`, to the default exchange unless
    /// [`exchange`](RabbitPublisherBuilder::exchange) says otherwise.
    ///
    /// ```no_run
    /// # async fn run() -> Result<(), guestlist_amqp::Error> {
    /// let publisher = guestlist_amqp::RabbitPublisher::builder("amqp://guest:guest@127.0.0.1:5672/%2f")
    ///     .exchange("orders")
    ///     .connect()
    ///     .await?;
    /// # let _ = publisher; Ok(()) }
    /// ```
    pub fn builder(url: &str) -> RabbitPublisherBuilder {
        RabbitPublisherBuilder {
            url: url.to_owned(),
            exchange: String::new(),
            max_message_size: DEFAULT_MAX_MESSAGE_SIZE,
        }
    }
}

impl RabbitPublisherBuilder {
    /// The exchange messages are published to, with their topic as the routing key (default
    /// `""`, the default exchange, which routes to the queue the topic names).
    pub fn exchange(mut self, exchange: &str) -> Self {
        self.exchange = exchange.to_owned();
        self
    }

    /// The broker's `max_message_size` (RabbitMQ 4's default, 16 MiB, unless set): a larger
    /// body is never sent and goes to the outgoing dead letters.
    pub fn max_message_size(mut self, bytes: usize) -> Self {
        self.max_message_size = bytes;
        self
    }

    /// Connects and opens a channel in confirm mode; a message's properties must then fit in
    /// the frame size the connection negotiated.
    pub async fn connect(self) -> Result<RabbitPublisher, Error> {
        if self.exchange.len() > MAX_SHORT_STRING {
            return Err(Error::Config(format!(
                "exchange name is {} bytes; AMQP names are at most {MAX_SHORT_STRING}",
                self.exchange.len()
            )));
        }
        let (channel, frame_max) = open_channel(&self.url).await?;
        Ok(RabbitPublisher {
            channel: Arc::new(tokio::sync::Mutex::new(channel)),
            url: self.url,
            exchange: self.exchange,
            frame_max: if frame_max > 0 {
                frame_max
            } else {
                DEFAULT_FRAME_MAX
            },
            max_message_size: self.max_message_size,
        })
    }
}

/// A connection to `url` and a channel on it in confirm mode, with the frame size it negotiated.
async fn open_channel(url: &str) -> Result<(Channel, u32), Error> {
    let connection = crate::connect(url).await?;
    let frame_max = connection.configuration().frame_max();
    let channel = connection.create_channel().await?;
    channel
        .confirm_select(ConfirmSelectOptions::default())
        .await?;
    Ok((channel, frame_max))
}

impl RabbitPublisher {
    /// The channel to publish on: the one open, or a new connection's if that one failed.
    async fn live_channel(&self) -> Result<Channel, Error> {
        let mut channel = self.channel.lock().await;
        if !channel.status().connected() {
            *channel = open_channel(&self.url).await?.0;
            tracing::info!("connected to RabbitMQ again; publishing goes on");
        }
        Ok(channel.clone())
    }

    /// About the bytes the message's properties take in its header frame (the fixed part, the
    /// message id and the headers table), over-counted a little.
    fn header_frame_bytes(message: &OutboxMessage) -> usize {
        let entry = |name: &str, value: usize| 1 + name.len() + 1 + value;
        let mut table = 4;
        if message.ordering_key.is_some() {
            table += entry(
                "guestlist-ordering-key",
                4 + message.ordering_key.as_ref().map_or(0, String::len),
            );
            table += entry("guestlist-seq", 8);
        }
        table += message
            .headers
            .iter()
            .map(|(name, value)| entry(name, 4 + value.len()))
            .sum::<usize>();
        // Frame header and end, class, weight, body size, flags, delivery mode.
        8 + 14 + 1 + (1 + message.message_id.len()) + table + 64
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
            // Checked before sending (Publish::check): a name over 255 bytes never gets here.
            if let Ok(name) = ShortString::try_new(name.as_str()) {
                headers.insert(name, text(value));
            }
        }
        BasicProperties::default()
            .with_delivery_mode(2)
            .with_headers(headers)
    }

    /// The outcome of `message`, from what RabbitMQ said of it.
    fn confirmed(
        &self,
        message: &OutboxMessage,
        verdict: Verdict,
    ) -> Result<Confirmed, PublishError> {
        match verdict {
            Verdict::Acked => Ok(Confirmed::New),
            // No queue takes it now; one may be bound later, so it is retried, not dead on the
            // first try.
            Verdict::Returned(code, text) => Err(PublishError::new(format!(
                "RabbitMQ routed {} nowhere ({code} {text}): bind a queue to exchange '{}' \
                 with routing key '{}'",
                message.message_id, self.exchange, message.topic
            ))),
            Verdict::Nacked => Err(PublishError::new(format!(
                "RabbitMQ refused {} (a negative publisher confirm): check the broker's logs \
                 and limits",
                message.message_id
            ))),
            Verdict::NotRequested => Err(PublishError::outage(
                "publisher confirms are off on this channel: build the publisher with \
                 RabbitPublisher::builder",
            )),
        }
    }
}

impl Publish for RabbitPublisher {
    fn check(&self, message: &OutboxMessage) -> Result<(), PublishError> {
        let short = |what: &str, value: &str| {
            if value.len() > MAX_SHORT_STRING {
                Err(PublishError::unpublishable(format!(
                    "its {what} is {} bytes; AMQP carries at most {MAX_SHORT_STRING}",
                    value.len()
                )))
            } else {
                Ok(())
            }
        };
        short("message id", &message.message_id)?;
        short("topic (the routing key)", &message.topic)?;
        for (name, _) in &message.headers {
            short("header name", name)?;
        }
        let header_frame = Self::header_frame_bytes(message);
        if header_frame > self.frame_max as usize {
            return Err(PublishError::unpublishable(format!(
                "its properties and headers take about {header_frame} bytes, over the \
                 connection's frame size of {}: shorten its ordering key or headers",
                self.frame_max
            )));
        }
        if message.payload.len() > self.max_message_size {
            return Err(PublishError::unpublishable(format!(
                "its body is {} bytes, over the broker's max_message_size of {}",
                message.payload.len(),
                self.max_message_size
            )));
        }
        Ok(())
    }

    async fn publish(&self, messages: &[OutboxMessage], outcomes: &mut Outcomes) {
        let options = BasicPublishOptions {
            mandatory: true,
            ..BasicPublishOptions::default()
        };
        let channel = match self.live_channel().await {
            Ok(channel) => channel,
            Err(err) => {
                let why = format!("cannot reach RabbitMQ: {err}");
                for _ in messages {
                    outcomes.push(Err(PublishError::outage(why.clone())));
                }
                return;
            }
        };
        // Each message's confirmation to wait for, or the outcome it already has.
        let mut confirms = Vec::with_capacity(messages.len());
        let mut settled = Vec::with_capacity(messages.len());
        for message in messages {
            let sent = match (
                ShortString::try_new(message.message_id.as_str()),
                ShortString::try_new(message.topic.as_str()),
            ) {
                (Ok(id), Ok(topic)) => {
                    channel
                        .basic_publish(
                            ShortString::from(self.exchange.as_str()),
                            topic,
                            options,
                            &message.payload,
                            Self::properties(message).with_message_id(id),
                        )
                        .await
                }
                // Checked before sending (Publish::check); never a panic if not.
                _ => {
                    confirms.push(None);
                    settled.push(Some(Err(PublishError::unpublishable(
                        "its id or topic is over AMQP's 255 bytes",
                    ))));
                    continue;
                }
            };
            match sent {
                Ok(confirm) => {
                    confirms.push(Some(confirm));
                    settled.push(None);
                }
                // The channel or the connection failed: the broker, not the message.
                Err(err) => {
                    confirms.push(None);
                    settled.push(Some(Err(PublishError::outage(err))));
                }
            }
        }
        let mut confirms = Confirms::new(confirms);
        for (n, message) in messages.iter().enumerate() {
            let outcome = match settled[n].take() {
                Some(outcome) => outcome,
                None => match confirms.verdict(n, &message.message_id).await {
                    Ok(verdict) => self.confirmed(message, verdict),
                    Err(err) => Err(PublishError::outage(err)),
                },
            };
            outcomes.push(outcome);
        }
    }
}
