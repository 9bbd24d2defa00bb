//! Whose key it is.

use sha2::{Digest, Sha256};

crate::printable::printable_newtype!(
    /// Who owns an idempotency key: a client, a tenant, an API key. Keys never cross scopes: the
    /// same key from two scopes names two operations, and one client's stored response is never
    /// replayed to another.
    ///
    /// ```
    /// use guestlist_core::Scope;
    /// let tenant = Scope::new("tenant-42")?;
    /// let client = Scope::from_credentials(b"Bearer sk_live_abc");
    /// assert_ne!(tenant, client);
    /// assert!(!client.as_str().contains("sk_live"), "credentials are hashed, never stored");
    /// # Ok::<(), guestlist_core::Error>(())
    /// ```
    Scope,
    "scope"
);

impl Scope {
    /// The name of `key` within this scope, distinct for every (scope, key) pair: the scope's
    /// length, the scope, the key (`8:tenant:a:b:c`), so that where the scope ends is never
    /// in doubt. Tenant `a` with key `b:c` and tenant `a:b` with key `c` stay two names.
    ///
    /// ```
    /// use guestlist_core::{IdempotencyKey, Scope};
    /// let key = |k| IdempotencyKey::new(k).unwrap();
    /// let a = Scope::new("a")?.qualify(&key("b:c"));
    /// let ab = Scope::new("a:b")?.qualify(&key("c"));
    /// assert_eq!((a.as_str(), ab.as_str()), ("1:a:b:c", "3:a:b:c"));
    /// # Ok::<(), guestlist_core::Error>(())
    /// ```
    pub fn qualify(&self, key: &crate::IdempotencyKey) -> String {
        format!("{}:{}:{}", self.0.len(), self.0, key.as_str())
    }

    /// A short name of this scope for traces and logs: the first 16 hex digits of its SHA-256,
    /// enough to tell clients apart, with no tenant's name or credentials in it.
    ///
    /// ```
    /// let digest = guestlist_core::Scope::new("tenant-42")?.digest();
    /// assert_eq!(digest.len(), 16);
    /// assert!(!digest.contains("tenant"));
    /// # Ok::<(), guestlist_core::Error>(())
    /// ```
    pub fn digest(&self) -> String {
        let mut digest = hex::encode(Sha256::digest(self.0.as_bytes()));
        digest.truncate(16);
        digest
    }

    /// A scope derived from the credentials a client sent (an `Authorization` header, an API
    /// key): `cred:` + the hex SHA-256 of the bytes, so that secrets never reach the store.
    pub fn from_credentials(credentials: &[u8]) -> Self {
        Self(format!("cred:{}", hex::encode(Sha256::digest(credentials))))
    }
}
