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

impl IdempotencyKey {
    /// The key as an `Idempotency-Key` header value that parses back to this very key: bare
    /// where it has no space, `"` or `\\`, else a Structured Field string (RFC 9651) with those
    /// escaped.
    ///
    /// ```
    /// use guestlist_core::IdempotencyKey;
    /// assert_eq!(IdempotencyKey::new("k-1")?.header_value(), "k-1");
    /// assert_eq!(IdempotencyKey::new(r#"a "b"\c"#)?.header_value(), r#""a \"b\"\\c""#);
    /// # Ok::<(), guestlist_core::Error>(())
    /// ```
    pub fn header_value(&self) -> std::borrow::Cow<'_, str> {
        if self
            .0
            .bytes()
            .all(|b| b.is_ascii_graphic() && !matches!(b, b'"' | b'\\'))
        {
            return std::borrow::Cow::Borrowed(&self.0);
        }
        let mut quoted = String::with_capacity(self.0.len() + 2);
        quoted.push('"');
        for c in self.0.chars() {
            if matches!(c, '"' | '\\') {
                quoted.push('\\');
            }
            quoted.push(c);
        }
        quoted.push('"');
        std::borrow::Cow::Owned(quoted)
    }

    /// The key for one downstream step of the work named by `parent` (a message id, or a
    /// request's scoped key): `evt_9f3k` and `charge` give `evt_9f3k/charge`, the same on every
    /// retry, and another key for another step. A step is 1 to 64 letters, digits, `_`, `.` or
    /// `-`; where `parent/step` would be over 255 bytes (or the step has other characters), the key
    /// is `sha256:` + the hex SHA-256 of both, which is as stable and as distinct.
    ///
    /// ```
    /// use guestlist_core::IdempotencyKey;
    /// let charge = IdempotencyKey::derive("evt_9f3k", "charge");
    /// assert_eq!(charge.as_str(), "evt_9f3k/charge");
    /// assert_eq!(charge, IdempotencyKey::derive("evt_9f3k", "charge"), "stable across retries");
    /// assert_ne!(charge, IdempotencyKey::derive("evt_9f3k", "email"), "one key per step");
    /// let long = IdempotencyKey::derive(&"x".repeat(300), "charge");
    /// assert!(long.as_str().starts_with("sha256:"));
    /// ```
    pub fn derive(parent: &str, step: &str) -> Self {
        let plain_step = (1..=64).contains(&step.len())
            && step
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'_' | b'.' | b'-'));
        let readable = format!("{parent}/{step}");
        if plain_step && crate::printable::check("idempotency key", &readable).is_ok() {
            return Self(readable);
        }
        use sha2::{Digest, Sha256};
        let mut hasher = Sha256::new();
        hasher.update((parent.len() as u64).to_be_bytes());
        hasher.update(parent.as_bytes());
        hasher.update(step.as_bytes());
        Self(format!("sha256:{}", hex::encode(hasher.finalize())))
    }
}
