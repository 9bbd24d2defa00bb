//! Who a client says the request is: the `Idempotency-Key`.

crate::printable::printable_newtype!(
    /// The key a client sends with a request it may retry (the `Idempotency-Key` header): 1 to
    /// 255 bytes of printable ASCII.
    ///
    /// The same key with the same request means "the same operation": the server runs it once
    /// and replays the stored response to every retry. Keys are scoped to a client (see
    /// [`Scope`](crate::Scope)); two clients may use the same key for different operations.
    ///
    /// ```
    /// use guestlist_core::IdempotencyKey;
    /// let key = IdempotencyKey::new("8e03978e-40d5-43e8-bc93-6894a57f9324")?;
    /// assert_eq!(key.as_str().len(), 36);
    /// assert!(IdempotencyKey::new("").is_err());
    /// # Ok::<(), guestlist_core::Error>(())
    /// ```
    IdempotencyKey,
    "idempotency key"
);
