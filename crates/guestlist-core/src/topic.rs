//! Where an outgoing message goes.

crate::printable::printable_newtype!(
    /// The destination of an outgoing message: a NATS subject, a RabbitMQ exchange's routing
    /// key, a Kafka topic (`orders.paid`), an SQS queue's name or URL.
    ///
    /// ```
    /// use guestlist_core::Topic;
    /// let topic = Topic::new("orders.paid")?;
    /// assert_eq!(topic.as_str(), "orders.paid");
    /// assert!(Topic::new("").is_err());
    /// # Ok::<(), guestlist_core::Error>(())
    /// ```
    Topic,
    "topic"
);
