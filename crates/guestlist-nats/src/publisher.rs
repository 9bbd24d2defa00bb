//! The outbox relay's publisher on JetStream: pipelined publishes, one publish ack each.

use std::str::FromStr;

use async_nats::jetstream::{self, context::PublishErrorKind};
use async_nats::{HeaderMap, HeaderName, HeaderValue};
use guestlist_core::{Confirmed, OutboxMessage, Outcomes, Publish, PublishError};

use crate::Error;

/// Publishes the outbox's messages to JetStream for the outbox's relay (`guestlist_sqlx::Relay`).
///
/// Each message goes to the subject named by its topic with `Nats-Msg-Id` set to its id, so
/// that the stream's duplicate window drops a relay's repeat (the publish ack says
/// `duplicate`, and the relay counts it). Its ordering key and place travel as
/// `Guestlist-Ordering-Key` and `Guestlist-Seq`, with the headers it was enqueued with. A
/// batch is sent without waiting between messages; the acks are awaited together.
///
/// The subjects must be captured by a stream whose duplicate window (2 minutes by default)
/// covers a relay's take-over; a subject no stream captures fails with what to do.
#[derive(Debug, Clone)]
pub struct JetStreamPublisher {
    context: jetstream::Context,
}

/// Settings for a [`JetStreamPublisher`]; [`connect`](Self::connect) connects it.
#[derive(Debug, Clone)]
#[must_use]
pub struct JetStreamPublisherBuilder {
    url: String,
}

impl JetStreamPublisherBuilder {
    /// Connects to the NATS server.
    pub async fn connect(self) -> Result<JetStreamPublisher, Error> {
        Ok(JetStreamPublisher::new(crate::connect(&self.url).await?))
    }
}

impl JetStreamPublisher {
    /// Settings for a publisher to the NATS server at `url`.
    ///
    /// ```no_run
    /// # async fn run() -> Result<(), guestlist_nats::Error> {
    /// let publisher = guestlist_nats::JetStreamPublisher::builder("nats://127.0.0.1:4222")
    ///     .connect()
    ///     .await?;
    /// # let _ = publisher; Ok(()) }
    /// ```
    pub fn builder(url: &str) -> JetStreamPublisherBuilder {
        JetStreamPublisherBuilder {
            url: url.to_owned(),
        }
    }

    /// A publisher on a JetStream context you already have.
    pub fn new(context: jetstream::Context) -> Self {
        Self { context }
    }

    /// The message's headers as NATS sends them; a header NATS cannot carry (a name with `:`,
    /// spaces or non-ASCII) is left out with a warning rather than holding the message back.
    fn headers(message: &OutboxMessage) -> HeaderMap {
        let mut headers = HeaderMap::new();
        headers.insert("Nats-Msg-Id", message.message_id.as_str());
        if let Some(key) = &message.ordering_key {
            headers.insert("Guestlist-Ordering-Key", key.as_str());
            headers.insert("Guestlist-Seq", message.seq.to_string().as_str());
        }
        for (name, value) in &message.headers {
            match (HeaderName::from_str(name), HeaderValue::from_str(value)) {
                (Ok(name), Ok(value)) => headers.append(name, value),
                _ => tracing::warn!(message_id = %message.message_id, header = %name,
                    "header left out: NATS cannot carry its name or value"),
            }
        }
        headers
    }
}

/// The largest header block NATS takes, whatever the server's `max_payload`.
const MAX_HEADER_BYTES: usize = 64 * 1024;

impl JetStreamPublisher {
    /// The bytes the message's headers take on the wire: `NATS/1.0\r\n`, a line each, and the
    /// blank line that ends them.
    fn header_bytes(message: &OutboxMessage) -> usize {
        let line = |name: &str, value: &str| name.len() + 2 + value.len() + 2;
        let mut bytes = "NATS/1.0\r\n".len() + 2 + line("Nats-Msg-Id", &message.message_id);
        if let Some(key) = &message.ordering_key {
            bytes += line("Guestlist-Ordering-Key", key);
            bytes += line("Guestlist-Seq", &message.seq.to_string());
        }
        bytes
            + message
                .headers
                .iter()
                .map(|(name, value)| line(name, value))
                .sum::<usize>()
    }
}

impl Publish for JetStreamPublisher {
    fn check(&self, message: &OutboxMessage) -> Result<(), PublishError> {
        let headers = Self::header_bytes(message);
        if headers > MAX_HEADER_BYTES {
            return Err(PublishError::unpublishable(format!(
                "its headers take {headers} bytes, over the {MAX_HEADER_BYTES} NATS takes: \
                 shorten its ordering key or headers"
            )));
        }
        let max_payload = self.context.client().server_info().max_payload;
        let size = headers + message.payload.len();
        if max_payload > 0 && size > max_payload {
            return Err(PublishError::unpublishable(format!(
                "it takes {size} bytes with its headers, over the server's max_payload of \
                 {max_payload}: raise max_payload in nats-server's configuration, or send less"
            )));
        }
        if message.topic.is_empty()
            || message
                .topic
                .bytes()
                .any(|b| b.is_ascii_whitespace() || b.is_ascii_control())
        {
            return Err(PublishError::unpublishable(format!(
                "topic {:?} is not a NATS subject (no spaces or control characters, not empty)",
                message.topic
            )));
        }
        Ok(())
    }

    async fn publish(&self, messages: &[OutboxMessage], outcomes: &mut Outcomes) {
        let mut pending = Vec::with_capacity(messages.len());
        for message in messages {
            let sent = self
                .context
                .publish_with_headers(
                    message.topic.clone(),
                    Self::headers(message),
                    message.payload.clone().into(),
                )
                .await;
            pending.push((message, sent));
        }
        for (message, sent) in pending {
            let acked = match sent {
                Ok(ack) => ack.await,
                Err(err) => Err(err),
            };
            outcomes.push(match acked {
                Ok(ack) if ack.duplicate => Ok(Confirmed::Duplicate),
                Ok(_) => Ok(Confirmed::New),
                Err(err) if err.kind() == PublishErrorKind::StreamNotFound => {
                    Err(PublishError::new(format!(
                        "no JetStream stream captures subject {}: add it to a stream \
                         (nats stream add --subjects '{}')",
                        message.topic, message.topic
                    )))
                }
                Err(err) if err.kind() == PublishErrorKind::MaxPayloadExceeded => {
                    Err(PublishError::unpublishable(err))
                }
                Err(err)
                    if matches!(
                        err.kind(),
                        PublishErrorKind::WrongLastMessageId | PublishErrorKind::WrongLastSequence
                    ) =>
                {
                    Err(PublishError::new(err))
                }
                // Timed out, a broken pipe, too many acks pending, or the server's own
                // trouble: the way to the stream, not the message.
                Err(err) => Err(PublishError::outage(err)),
            });
        }
    }
}
