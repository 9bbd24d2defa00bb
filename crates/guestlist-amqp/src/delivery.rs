//! One RabbitMQ delivery: its acknowledgements, hand-backs and dead letter, and the set of
//! deliveries a channel has not settled yet.

use std::collections::BTreeSet;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use guestlist_consumer::{BoxError, Delivery};
use lapin::Channel;
use lapin::options::{BasicAckOptions, BasicNackOptions, BasicPublishOptions, BasicRejectOptions};
use lapin::types::{AMQPValue, LongString, ShortString};

/// The delivery tags this channel has handed out and not yet acknowledged, handed back or
/// rejected: a `multiple` acknowledgement must not settle one of them by accident.
pub(crate) type Unsettled = Arc<Mutex<BTreeSet<u64>>>;

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
    pub(crate) delivery: lapin::message::Delivery,
    pub(crate) channel: Channel,
    pub(crate) dead_letters: Option<(String, String)>,
    pub(crate) unsettled: Unsettled,
    /// The queue it came from: a retried dead letter goes back there, through the default
    /// exchange, and to no other queue bound where it was first published.
    pub(crate) queue: std::sync::Arc<str>,
}

/// The set, even if a thread panicked while holding it (a set of integers stays whole).
pub(crate) fn lock(unsettled: &Unsettled) -> std::sync::MutexGuard<'_, BTreeSet<u64>> {
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

    fn return_topic(&self) -> Option<String> {
        Some(self.queue.to_string())
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
