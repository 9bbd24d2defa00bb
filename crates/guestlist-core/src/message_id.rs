//! Which message it is.

use sha2::{Digest, Sha256};

crate::printable::printable_newtype!(
    /// The stable id of a message: `evt_9f3k`, a broker's message id, `X-GitHub-Delivery`.
    ///
    /// 1 to 255 bytes of printable ASCII; anything else is refused with an error that says why.
    /// Ids compare byte for byte on every backend: `evt_A` and `evt_a` are two messages.
    ///
    /// ```
    /// use guestlist_core::MessageId;
    /// let id = MessageId::new("evt_9f3k")?;
    /// assert_eq!(id.as_str(), "evt_9f3k");
    ///
    /// let err = MessageId::new("x".repeat(312)).unwrap_err();
    /// assert!(err.to_string().contains("312 bytes; the limit is 255"));
    /// # Ok::<(), guestlist_core::Error>(())
    /// ```
    MessageId,
    "message id"
);

impl MessageId {
    /// Prefix of ids derived from content.
    pub const DERIVED_PREFIX: &'static str = "sha256:";

    /// Derives an id for an upstream that sends none: `sha256:` + the hex SHA-256 of `raw`.
    ///
    /// Pass the **exact bytes received**, never a re-serialized copy: JSON libraries reorder keys
    /// and reformat numbers, and a reordered body would pose as a new event.
    ///
    /// ```
    /// use guestlist_core::MessageId;
    /// let a = MessageId::from_raw_bytes(br#"{"a":1,"b":2}"#);
    /// let b = MessageId::from_raw_bytes(br#"{"b":2,"a":1}"#);
    /// assert_ne!(a, b, "the same JSON object, but not the same bytes");
    /// assert_eq!(a.as_str().len(), "sha256:".len() + 64);
    /// ```
    pub fn from_raw_bytes(raw: &[u8]) -> Self {
        let digest = Sha256::digest(raw);
        Self(format!("{}{}", Self::DERIVED_PREFIX, hex::encode(digest)))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::Error;

    #[test]
    fn refuses_empty_long_and_non_ascii_ids() {
        assert_eq!(MessageId::new(""), Err(Error::Empty { what: "message id" }));
        assert!(matches!(
            MessageId::new("a".repeat(256)),
            Err(Error::TooLong { len: 256, .. })
        ));
        assert!(MessageId::new("a".repeat(255)).is_ok());
        assert!(matches!(
            MessageId::new("évt"),
            Err(Error::NotPrintableAscii {
                position: 0,
                byte: 0xc3,
                ..
            })
        ));
        assert!(matches!(
            MessageId::new("evt\n"),
            Err(Error::NotPrintableAscii { position: 3, .. })
        ));
    }

    #[test]
    fn derived_id_is_sha256_of_the_exact_bytes() {
        // SHA-256("abc") from FIPS 180-2, appendix B.1.
        assert_eq!(
            MessageId::from_raw_bytes(b"abc").as_str(),
            "sha256:ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"
        );
        assert!(MessageId::new(MessageId::from_raw_bytes(b"").into_string()).is_ok());
    }
}
