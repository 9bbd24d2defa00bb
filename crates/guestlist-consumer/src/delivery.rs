//! What a broker adapter provides.

use std::future::Future;
use std::time::Duration;

use guestlist_core::BoxError;

/// One delivery of a message, as a broker hands it over.
pub trait Delivery: Send + Sync + 'static {
    /// The payload, exactly as received.
    fn payload(&self) -> &[u8];
    /// A header's value, if the message has it.
    fn header(&self, name: &str) -> Option<&str>;
    /// Every header of the message, name and value, in the broker's order (none by default): a
    /// value that is not text is written as text. The handler sees them in
    /// [`Message::headers`](crate::Message::headers).
    fn headers(&self) -> Vec<(String, String)> {
        Vec::new()
    }
    /// The broker's key of the message, where it has one: a Kafka record's key, an SQS FIFO
    /// message's group id. None by default.
    fn key(&self) -> Option<String> {
        None
    }
    /// Where the message was published, where the broker says: a NATS subject, an AMQP
    /// routing key, a Kafka topic. None by default.
    fn topic(&self) -> Option<String> {
        None
    }
    /// Where a retry of this message, once dead-lettered, is published to reach this consumer
    /// again (`guestlist inbox dead retry`): the subject, queue or topic it reads. By default
    /// [`topic`](Self::topic); a RabbitMQ delivery names its queue (reached through the default
    /// exchange), an SQS one its queue's URL.
    fn return_topic(&self) -> Option<String> {
        self.topic()
    }
    /// The broker's own id for the message (`Nats-Msg-Id`, AMQP `message_id`), if it set one.
    fn broker_id(&self) -> Option<&str>;
    /// How many times this message has been delivered, this time included (1 the first time).
    fn delivery_count(&self) -> u32;
    /// Acknowledges the message.
    fn ack(&self) -> impl Future<Output = Result<(), BoxError>> + Send;
    /// Acknowledges a committed batch in as few round trips as the broker allows (one after
    /// another, by default). Called only after the batch's transaction committed: a lost
    /// acknowledgement brings a redelivery, which the inbox answers as a duplicate.
    fn ack_all(deliveries: &[&Self]) -> impl Future<Output = Result<(), BoxError>> + Send
    where
        Self: Sized,
    {
        async move {
            let mut first_error = None;
            for delivery in deliveries {
                if let Err(err) = delivery.ack().await {
                    first_error.get_or_insert(err);
                }
            }
            first_error.map_or(Ok(()), Err)
        }
    }
    /// Hands the message back, to be delivered again after `delay`.
    fn nak(&self, delay: Duration) -> impl Future<Output = Result<(), BoxError>> + Send;
    /// Moves the message to the dead-letter place, with `reason`, and stops its deliveries.
    fn dead_letter(&self, reason: &str) -> impl Future<Output = Result<(), BoxError>> + Send;
    /// Tells the broker the message is still being worked on, so it is not redelivered yet.
    fn keep_alive(&self) -> impl Future<Output = Result<(), BoxError>> + Send;
    /// Whether the source took this delivery back before it was handled: an earlier message
    /// of its partition was handed back, or its partition moved to another consumer (Kafka).
    /// It will be delivered again, so the consumer neither handles nor settles it. Never, by
    /// default.
    fn withdrawn(&self) -> bool {
        false
    }
    /// Whether the broker counted this delivery in the message's
    /// [`delivery_count`](Self::delivery_count) even when it was [withdrawn](Self::withdrawn):
    /// an SQS FIFO message handed back with an earlier one of its group is received again with
    /// a higher `ApproximateReceiveCount`. The consumer then records the withdrawal in the
    /// inbox (beside the message's deferrals), so that it does not count against the message.
    /// No, by default (Kafka counts only a record's own failures).
    fn counts_withdrawn(&self) -> bool {
        false
    }
}

/// Where deliveries come from: a JetStream consumer, a RabbitMQ queue.
pub trait Source: Send + Sync + 'static {
    /// The deliveries this source hands out.
    type Delivery: Delivery;

    /// Up to `max` deliveries; fewer (or none) when no more arrive within a short wait.
    fn fetch(
        &mut self,
        max: usize,
    ) -> impl Future<Output = Result<Vec<Self::Delivery>, BoxError>> + Send;

    /// Up to `max` deliveries that are ready now, without waiting for any: the consumer takes
    /// the next batch this way while the current one commits. None by default.
    fn fetch_ready(
        &mut self,
        max: usize,
    ) -> impl Future<Output = Result<Vec<Self::Delivery>, BoxError>> + Send {
        let _ = max;
        std::future::ready(Ok(Vec::new()))
    }

    /// How long the broker waits for an acknowledgement before it redelivers, where it has
    /// such a limit (JetStream's ack wait). Handlers must finish or keep their deliveries alive
    /// well within it.
    fn ack_wait(&self) -> Option<Duration>;

    /// How long after its first delivery a message may still be redelivered, where the broker
    /// bounds it. The inbox's retention must outlive it.
    fn redelivery_horizon(&self) -> Option<Duration>;

    /// The consumer orders messages by key itself ([`Consumer::concurrency`] above one): a
    /// message handed back goes back alone, and the consumer keeps its key's later messages
    /// waiting behind it, rather than the source taking the rest of its partition back with it
    /// (Kafka then parks a record handed back in memory, and hands it out again after its delay,
    /// while its partition goes on; NATS, at start, waits for the messages a dead process left
    /// in hand to be redelivered before it fetches newer ones). Nothing by default: the other
    /// brokers hand a message back alone anyway, and give a dead consumer's messages first.
    ///
    /// [`Consumer::concurrency`]: crate::Consumer::concurrency
    fn order_by_key(&mut self) {}

    /// The delivery count at which the broker dead-letters a message by itself, where it is
    /// set to (an SQS queue's redrive policy): the consumer then dead-letters at that count
    /// instead of its own [`max_deliveries`](crate::Consumer::max_deliveries), leaving the
    /// message to the broker. None by default.
    fn max_deliveries(&self) -> Option<u32> {
        None
    }
}
