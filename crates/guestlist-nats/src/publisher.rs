//! The outbox relay's publisher on JetStream: pipelined publishes, one publish ack each.

use std::str::FromStr;

use async_nats::jetstream::{self, context::PublishErrorKind};
use async_nats::{HeaderMap, HeaderName, HeaderValue};
use guestlist_sqlx::{Confirmed, OutboxMessage, Publish, PublishError};

use crate::Error;

/// Publishes the outbox's messages to JetStream for a [`guestlist_sqlx::Relay`].
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

impl JetStreamPublisher {
    /// A publisher on an existing JetStream context.
    pub fn new(context: jetstream::Context) -> Self {
        Self { context }
    }

    /// Connects to the NATS server at `url`.
    pub async fn connect(url: &str) -> Result<Self, Error> {
        Ok(Self::new(crate::connect(url).await?))
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

impl Publish for JetStreamPublisher {
    async fn publish(&self, messages: &[OutboxMessage]) -> Vec<Result<Confirmed, PublishError>> {
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
        let mut outcomes = Vec::with_capacity(pending.len());
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
                Err(err) => Err(PublishError::new(err)),
            });
        }
        outcomes
    }
}
