//! Who handles a message.

crate::printable::printable_newtype!(
    /// The name of a consumer of messages (`warehouse`, `email`, `loyalty`).
    ///
    /// The same event fans out to many handlers and each keeps its own rows: the first handler to
    /// touch an event must not steal it from the rest.
    ///
    /// ```
    /// use guestlist_core::HandlerName;
    /// let warehouse = HandlerName::new("warehouse")?;
    /// assert_eq!(warehouse.to_string(), "warehouse");
    /// assert!(HandlerName::new("").is_err());
    /// # Ok::<(), guestlist_core::Error>(())
    /// ```
    HandlerName,
    "handler name"
);
