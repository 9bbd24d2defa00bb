//! guestlist's consumer on NATS JetStream.
//!
//! [`JetStreamSource`] pulls from a durable consumer with explicit acknowledgement: each fetch
//! takes what the stream has ready, up to the batch limit, and waits only while nothing is. A
//! committed batch is acknowledged with pipelined acks and one flush (one round trip for the
//! batch; [`JetStreamSource::confirmed_acks`] waits for the server to confirm each instead).
//! Deliveries hand messages back with a delayed NAK, keep long handlers alive with in-progress
//! acks, and dead-letter by publishing the message with its error to a dead-letter subject, then
//! terminating it.
//!
//! [`JetStreamPublisher`] is the other direction: the outbox relay's publisher, with
//! `Nats-Msg-Id` set so that the stream drops a relay's repeat.
//!
//! The guide tells the whole story, with each part's guarantees and failure tables: see
//! [broker consumers](https://github.com/guestlist-rs/guestlist/blob/main/docs/guide/src/consumers.md)
//! (or build it locally with `mdbook serve docs/guide`).

use std::time::Duration;

use async_nats::HeaderMap;
use async_nats::jetstream::consumer::{AckPolicy, PullConsumer, pull};
use async_nats::jetstream::{self, AckKind};
use futures_util::StreamExt;
use guestlist_consumer::{BoxError, Delivery, Source};

mod publisher;

pub use publisher::JetStreamPublisher;

/// A failure to set up the source or the publisher, with what to do about it.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// NATS could not be reached.
    #[error(
        "cannot connect to NATS at {url}: {source} — check that nats-server runs with JetStream (-js)"
    )]
    Connect {
        /// The URL tried.
        url: String,
        /// NATS's error.
        source: async_nats::ConnectError,
    },
    /// The stream does not exist.
    #[error(
        "JetStream stream {stream} does not exist: create it first (nats stream add {stream}, or jetstream::Context::create_stream)"
    )]
    MissingStream {
        /// The stream looked for.
        stream: String,
    },
    /// JetStream refused or failed.
    #[error("JetStream error: {0}")]
    JetStream(String),
}

/// A JetStream context on the NATS server at `url`.
async fn connect(url: &str) -> Result<jetstream::Context, Error> {
    let client = async_nats::connect(url)
        .await
        .map_err(|source| Error::Connect {
            url: url.to_owned(),
            source,
        })?;
    Ok(jetstream::new(client))
}

/// Deliveries from a durable JetStream pull consumer.
pub struct JetStreamSource {
    context: jetstream::Context,
    consumer: PullConsumer,
    ack_wait: Duration,
    horizon: Option<Duration>,
    dead_letters: String,
    fetch_wait: Duration,
    confirmed_acks: bool,
}

impl std::fmt::Debug for JetStreamSource {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("JetStreamSource")
            .field("ack_wait", &self.ack_wait)
            .field("dead_letters", &self.dead_letters)
            .finish_non_exhaustive()
    }
}

impl JetStreamSource {
    /// How long the server waits for an acknowledgement before redelivering, unless set.
    pub const DEFAULT_ACK_WAIT: Duration = Duration::from_secs(30);

    /// Connects to `url` and binds the durable pull consumer `durable` on `stream` (created if
    /// missing, with explicit acks and `ack_wait`). Dead letters go to `dead_letters`, a subject
    /// some stream should capture.
    pub async fn connect(
        url: &str,
        stream: &str,
        durable: &str,
        ack_wait: Duration,
        dead_letters: &str,
    ) -> Result<Self, Error> {
        let context = connect(url).await?;
        let mut handle = context
            .get_stream(stream)
            .await
            .map_err(|_| Error::MissingStream {
                stream: stream.to_owned(),
            })?;
        let info = handle
            .info()
            .await
            .map_err(|e| Error::JetStream(e.to_string()))?;
        let max_age = info.config.max_age;
        let consumer: PullConsumer = handle
            .get_or_create_consumer(
                durable,
                pull::Config {
                    durable_name: Some(durable.to_owned()),
                    ack_policy: AckPolicy::Explicit,
                    ack_wait,
                    ..Default::default()
                },
            )
            .await
            .map_err(|e| Error::JetStream(e.to_string()))?;
        Ok(Self {
            context,
            consumer,
            ack_wait,
            horizon: (!max_age.is_zero()).then_some(max_age),
            dead_letters: dead_letters.to_owned(),
            fetch_wait: Duration::from_millis(250),
            confirmed_acks: false,
        })
    }

    /// How long a fetch waits for a first message when none is ready, before it returns empty
    /// (default 250 ms). A fetch returns as soon as one message is there.
    pub fn fetch_wait(mut self, wait: Duration) -> Self {
        self.fetch_wait = wait;
        self
    }

    /// Waits for the server to confirm every acknowledgement (a double ack, one round trip per
    /// message) instead of sending a batch's acks together and flushing once (default off).
    /// guestlist does not need it: an acknowledgement lost after the commit brings a
    /// redelivery, which the inbox answers as a duplicate.
    pub fn confirmed_acks(mut self, on: bool) -> Self {
        self.confirmed_acks = on;
        self
    }

    fn delivery(&self, message: jetstream::Message) -> JetStreamDelivery {
        let delivered = message.info().map(|info| info.delivered).unwrap_or(1);
        JetStreamDelivery {
            message,
            delivered: u32::try_from(delivered).unwrap_or(u32::MAX),
            context: self.context.clone(),
            dead_letters: self.dead_letters.clone(),
            confirmed_acks: self.confirmed_acks,
        }
    }
}

impl Source for JetStreamSource {
    type Delivery = JetStreamDelivery;

    async fn fetch(&mut self, max: usize) -> Result<Vec<JetStreamDelivery>, BoxError> {
        let mut deliveries = self.fetch_ready(max).await?;
        if !deliveries.is_empty() {
            return Ok(deliveries);
        }
        // Nothing ready: wait for the first message, and return it as soon as it comes.
        let mut first = self
            .consumer
            .batch()
            .max_messages(1)
            .expires(self.fetch_wait)
            .messages()
            .await?;
        while let Some(message) = first.next().await {
            deliveries.push(self.delivery(message?));
        }
        Ok(deliveries)
    }

    async fn fetch_ready(&mut self, max: usize) -> Result<Vec<JetStreamDelivery>, BoxError> {
        // A no-wait pull: the server sends what it has, up to `max`, and ends the request.
        let mut ready = self.consumer.fetch().max_messages(max).messages().await?;
        let mut deliveries = Vec::with_capacity(max);
        while let Some(message) = ready.next().await {
            deliveries.push(self.delivery(message?));
        }
        Ok(deliveries)
    }

    fn ack_wait(&self) -> Option<Duration> {
        Some(self.ack_wait)
    }

    fn redelivery_horizon(&self) -> Option<Duration> {
        self.horizon
    }
}

/// One JetStream delivery. A handler reaches it with
/// [`Message::delivery`](guestlist_consumer::Message::delivery), for the message itself
/// ([`JetStreamDelivery::message`]: its subject, stream sequence, timestamps).
pub struct JetStreamDelivery {
    message: jetstream::Message,
    delivered: u32,
    context: jetstream::Context,
    dead_letters: String,
    confirmed_acks: bool,
}

impl JetStreamDelivery {
    /// The JetStream message as received: subject, headers, and its info (stream and consumer
    /// sequences, timestamp) through `message().info()`.
    pub fn message(&self) -> &jetstream::Message {
        &self.message
    }
}

impl Delivery for JetStreamDelivery {
    fn payload(&self) -> &[u8] {
        &self.message.payload
    }

    fn header(&self, name: &str) -> Option<&str> {
        self.message.headers.as_ref()?.get(name).map(|v| v.as_str())
    }

    fn headers(&self) -> Vec<(String, String)> {
        let Some(headers) = self.message.headers.as_ref() else {
            return Vec::new();
        };
        let mut all: Vec<(String, String)> = headers
            .iter()
            .flat_map(|(name, values)| {
                values
                    .iter()
                    .map(move |value| (name.to_string(), value.as_str().to_owned()))
            })
            .collect();
        // The map keeps no order: sorted by name, so that it reads the same every time.
        all.sort();
        all
    }

    fn topic(&self) -> Option<String> {
        Some(self.message.subject.to_string())
    }

    fn broker_id(&self) -> Option<&str> {
        self.header("Nats-Msg-Id")
    }

    fn delivery_count(&self) -> u32 {
        self.delivered
    }

    async fn ack(&self) -> Result<(), BoxError> {
        if self.confirmed_acks {
            self.message.double_ack().await
        } else {
            self.message.ack().await
        }
    }

    async fn ack_all(deliveries: &[&Self]) -> Result<(), BoxError> {
        let Some(first) = deliveries.first() else {
            return Ok(());
        };
        if first.confirmed_acks {
            for delivery in deliveries {
                delivery.message.double_ack().await?;
            }
            return Ok(());
        }
        // Sent back to back, then one flush: the batch costs one round trip, not one each.
        for delivery in deliveries {
            delivery.message.ack().await?;
        }
        first.context.client().flush().await?;
        Ok(())
    }

    async fn nak(&self, delay: Duration) -> Result<(), BoxError> {
        self.message.ack_with(AckKind::Nak(Some(delay))).await
    }

    async fn dead_letter(&self, reason: &str) -> Result<(), BoxError> {
        // The message's own headers, but NATS's (`Nats-Msg-Id` would be deduplicated in the
        // dead-letter stream; `Nats-Expected-*` would refuse the publish).
        let mut headers = HeaderMap::new();
        for (name, values) in self.message.headers.iter().flat_map(|h| h.iter()) {
            let name_text: &str = name.as_ref();
            if name_text
                .get(..5)
                .is_some_and(|p| p.eq_ignore_ascii_case("nats-"))
            {
                continue;
            }
            for value in values {
                headers.append(name.clone(), value.clone());
            }
        }
        // Header values hold one line.
        let reason: String = reason
            .chars()
            .map(|c| if c.is_control() { ' ' } else { c })
            .collect();
        headers.insert("Guestlist-Error", reason.as_str());
        headers.insert("Guestlist-Subject", self.message.subject.as_str());
        headers.insert("Guestlist-Deliveries", self.delivered.to_string().as_str());
        if let Some(id) = self.broker_id() {
            headers.insert("Guestlist-Msg-Id", id);
        }
        // Stored in the dead-letter stream first, then stopped here: nothing is dropped.
        self.context
            .publish_with_headers(
                self.dead_letters.clone(),
                headers,
                self.message.payload.clone(),
            )
            .await?
            .await?;
        self.message.ack_with(AckKind::Term).await
    }

    async fn keep_alive(&self) -> Result<(), BoxError> {
        self.message.ack_with(AckKind::Progress).await
    }
}
