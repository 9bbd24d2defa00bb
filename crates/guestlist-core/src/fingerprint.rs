//! What makes two requests "the same request".

use sha2::{Digest, Sha256};

/// SHA-256 over what makes two requests the same request: the method, the path and query, any
/// headers chosen to count, and the raw body bytes.
///
/// A retry with the same key must carry the same fingerprint; the same key with another
/// fingerprint is a client bug (a reused key) and is refused rather than replayed.
///
/// Each part is hashed with its length in front, so no two different requests can run together
/// into the same bytes (`POST` + `/ab` never collides with `POST/` + `ab`).
///
/// ```
/// use guestlist_core::Fingerprint;
/// let a = Fingerprint::builder("POST", "/payments?currency=eur").body(br#"{"amount":100}"#);
/// let b = Fingerprint::builder("POST", "/payments?currency=eur").body(br#"{"amount":101}"#);
/// assert_ne!(a, b);
/// assert_eq!(a.to_hex().len(), 64);
/// ```
#[derive(Clone, Copy, PartialEq, Eq, Hash)]
pub struct Fingerprint([u8; 32]);

/// Builds a [`Fingerprint`] part by part; finish with [`FingerprintBuilder::body`].
#[derive(Clone)]
pub struct FingerprintBuilder(Sha256);

impl Fingerprint {
    /// Starts a fingerprint of a request with `method` to `path_and_query`.
    pub fn builder(method: &str, path_and_query: &str) -> FingerprintBuilder {
        let mut hasher = Sha256::new();
        hasher.update(b"guestlist-fingerprint-v1");
        let mut builder = FingerprintBuilder(hasher);
        builder.part(method.as_bytes());
        builder.part(path_and_query.as_bytes());
        builder
    }

    /// A fingerprint read back from its 32 bytes.
    pub fn from_bytes(bytes: [u8; 32]) -> Self {
        Self(bytes)
    }

    /// The 32 bytes of the digest.
    pub fn as_bytes(&self) -> &[u8; 32] {
        &self.0
    }

    /// The digest in lowercase hex.
    pub fn to_hex(&self) -> String {
        hex::encode(self.0)
    }
}

impl std::fmt::Debug for Fingerprint {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Fingerprint({})", self.to_hex())
    }
}

impl FingerprintBuilder {
    fn part(&mut self, bytes: &[u8]) {
        self.0.update((bytes.len() as u64).to_be_bytes());
        self.0.update(bytes);
    }

    /// Adds a header that counts towards sameness (name lowercased; absent headers count as
    /// absent, not as empty).
    pub fn header(mut self, name: &str, value: Option<&[u8]>) -> Self {
        self.part(name.to_ascii_lowercase().as_bytes());
        match value {
            Some(value) => {
                self.0.update([1]);
                self.part(value);
            }
            None => self.0.update([0]),
        }
        self
    }

    /// Adds the raw body bytes, exactly as received, and finishes.
    pub fn body(mut self, raw: &[u8]) -> Fingerprint {
        self.part(raw);
        Fingerprint(self.0.finalize().into())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parts_cannot_run_together() {
        let a = Fingerprint::builder("POST", "/ab").body(b"");
        let b = Fingerprint::builder("POST/", "ab").body(b"");
        assert_ne!(a, b);
        let absent = Fingerprint::builder("POST", "/")
            .header("x-a", None)
            .body(b"");
        let empty = Fingerprint::builder("POST", "/")
            .header("x-a", Some(b""))
            .body(b"");
        assert_ne!(absent, empty);
        let upper = Fingerprint::builder("POST", "/")
            .header("X-A", Some(b"1"))
            .body(b"");
        let lower = Fingerprint::builder("POST", "/")
            .header("x-a", Some(b"1"))
            .body(b"");
        assert_eq!(upper, lower, "header names are case-insensitive");
    }
}
