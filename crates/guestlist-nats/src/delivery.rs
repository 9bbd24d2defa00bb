//! One JetStream delivery: its acknowledgements, hand-backs and dead letter.

use std::time::Duration;

use async_nats::HeaderMap;
use async_nats::jetstream::{self, AckKind};
use guestlist_consumer::{BoxError, Delivery};

/// One JetStream delivery. A handler reaches it with
/// [`Message::delivery`](guestlist_consumer::Message::delivery), for the message itself
/// ([`JetStreamDelivery::message`]: its subject, stream sequence, timestamps).
pub struct JetStreamDelivery {
    pub(crate) message: jetstream::Message,
    pub(crate) delivered: u32,
    pub(crate) context: jetstream::Context,
    pub(crate) dead_letters: String,
    pub(crate) confirmed_acks: bool,
}

impl JetStreamDelivery {
    /// The JetStream message as received: subject, headers, and its info (stream and consumer
    /// sequences, timestamp) through `message().info()`.
    pub fn message(&self) -> &jetstream::Message {
        &self.message
    }
}

/// A NATS message's headers as `(name, value)` pairs, every value of a repeated header, sorted
/// by name: what [`Delivery::headers`] gives a handler of a JetStream delivery, for a message
/// read another way (`Stream::get_raw_message`, a dead letter).
pub fn header_pairs(headers: &HeaderMap) -> Vec<(String, String)> {
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

impl Delivery for JetStreamDelivery {
    fn payload(&self) -> &[u8] {
        &self.message.payload
    }

    fn header(&self, name: &str) -> Option<&str> {
        self.message.headers.as_ref()?.get(name).map(|v| v.as_str())
    }

    fn headers(&self) -> Vec<(String, String)> {
        self.message
            .headers
            .as_ref()
            .map_or_else(Vec::new, header_pairs)
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
