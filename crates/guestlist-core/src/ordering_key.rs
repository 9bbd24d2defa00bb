//! Which messages keep their order.

crate::printable::printable_newtype!(
    /// The key whose messages are published in the order their transactions committed (an
    /// order's id, a customer's id). Messages with no key, or with different keys, carry no
    /// order between them.
    ///
    /// ```
    /// use guestlist_core::OrderingKey;
    /// let order = OrderingKey::new("order-42")?;
    /// assert_eq!(order.as_str(), "order-42");
    /// # Ok::<(), guestlist_core::Error>(())
    /// ```
    OrderingKey,
    "ordering key"
);
