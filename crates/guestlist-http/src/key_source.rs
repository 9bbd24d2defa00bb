//! Where a request's idempotency key comes from: a header, a field of the body, or the body's
//! own bytes.

use guestlist_core::json_id::{self, JsonId};
use guestlist_core::{IdempotencyKey, MessageId};
use http::{HeaderMap, HeaderName};

use crate::key_header::{self, KeyHeader};

/// Where the layer finds each request's idempotency key.
///
/// A header is the usual place (`Idempotency-Key`, or a webhook provider's own delivery id such
/// as `X-GitHub-Delivery`). A webhook sender that puts its event id in the body (Stripe's
/// `evt_…` at `/id`) is keyed by [`KeySource::JsonPointer`]; one that sends no id at all by
/// [`KeySource::BodySha256`]. Both read the raw bytes received, never a re-serialized copy.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum KeySource {
    /// A header: a Structured Field string (`"k"`) or a bare token (`k`), which name the same key.
    Header(HeaderName),
    /// The string (or integer) at this JSON Pointer (RFC 6901) in the request body, e.g. `/id`.
    JsonPointer(String),
    /// `sha256:` + the hex SHA-256 of the raw request body.
    BodySha256,
}

impl Default for KeySource {
    fn default() -> Self {
        Self::Header(HeaderName::from_static("idempotency-key"))
    }
}

impl KeySource {
    /// Whether the key is in the body, so that the body must be read before the key is known.
    pub(crate) fn in_body(&self) -> bool {
        !matches!(self, KeySource::Header(_))
    }

    /// The key's place, as messages name it: `Idempotency-Key`, `the JSON value at /id`.
    pub(crate) fn describe(&self) -> String {
        match self {
            KeySource::Header(name) => title(name),
            KeySource::JsonPointer(pointer) => format!("JSON value at {pointer}"),
            KeySource::BodySha256 => "SHA-256 of the body".to_owned(),
        }
    }

    /// What a client should send so that a request has a key here.
    pub(crate) fn how_to_send(&self) -> String {
        match self {
            KeySource::Header(name) => format!(
                "send an {} header: a new random key (a UUID) with each new operation, and the \
                 same key when you retry it",
                title(name)
            ),
            KeySource::JsonPointer(pointer) => format!(
                "send a JSON body with a string of 1 to 255 printable ASCII characters at {pointer}, \
                 the same on every retry"
            ),
            KeySource::BodySha256 => "send a non-empty body".to_owned(),
        }
    }

    /// The key of a request with `headers` (and, for keys in the body, `body`).
    pub(crate) fn read(&self, headers: &HeaderMap, body: &[u8]) -> KeyHeader {
        match self {
            KeySource::Header(name) => key_header::read(headers, name),
            KeySource::BodySha256 if body.is_empty() => KeyHeader::Missing,
            KeySource::BodySha256 => {
                let id = MessageId::from_raw_bytes(body);
                KeyHeader::Key(IdempotencyKey::new(id.as_str()).expect("a SHA-256 id is a key"))
            }
            KeySource::JsonPointer(pointer) => {
                let text = match json_id::read(body, pointer) {
                    JsonId::Found(text) => text,
                    JsonId::Absent => return KeyHeader::Missing,
                    JsonId::NotJson(_) if body.is_empty() => return KeyHeader::Missing,
                    JsonId::NotJson(err) => {
                        return KeyHeader::Malformed(format!(
                            "the body is not JSON ({err}), so it has no key at {pointer}"
                        ));
                    }
                    JsonId::NotAnId(kind) => {
                        return KeyHeader::Malformed(format!(
                            "the value at {pointer} is {kind}, not a string or an integer"
                        ));
                    }
                    _ => return KeyHeader::Missing,
                };
                match IdempotencyKey::new(text) {
                    Ok(key) => KeyHeader::Key(key),
                    Err(err) => KeyHeader::Malformed(format!("the value at {pointer}: {err}")),
                }
            }
        }
    }
}

/// A header name as people write it: `Idempotency-Key`.
pub(crate) fn title(name: &HeaderName) -> String {
    name.as_str()
        .split('-')
        .map(|word| {
            let mut chars = word.chars();
            chars.next().map_or_else(String::new, |first| {
                first.to_ascii_uppercase().to_string() + chars.as_str()
            })
        })
        .collect::<Vec<_>>()
        .join("-")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key(source: &KeySource, body: &[u8]) -> KeyHeader {
        source.read(&HeaderMap::new(), body)
    }

    #[test]
    fn a_json_pointer_reads_the_raw_body() {
        let id = KeySource::JsonPointer("/id".into());
        let KeyHeader::Key(k) = key(&id, br#"{"id": "evt_9f3k", "type": "charge.succeeded"}"#)
        else {
            panic!("a key")
        };
        assert_eq!(k.as_str(), "evt_9f3k");
        let KeyHeader::Key(k) = key(&id, br#"{"id": 42}"#) else {
            panic!("a key")
        };
        assert_eq!(k.as_str(), "42");
        assert_eq!(key(&id, br#"{"type": "x"}"#), KeyHeader::Missing);
        assert_eq!(key(&id, b""), KeyHeader::Missing);
        assert!(matches!(key(&id, b"{not json"), KeyHeader::Malformed(_)));
        assert!(matches!(
            key(&id, br#"{"id": {"a": 1}}"#),
            KeyHeader::Malformed(_)
        ));
        assert!(matches!(
            key(&id, br#"{"id": ""}"#),
            KeyHeader::Malformed(_)
        ));
    }

    #[test]
    fn body_sha256_hashes_the_bytes_received() {
        let sha = KeySource::BodySha256;
        let (KeyHeader::Key(a), KeyHeader::Key(b)) = (
            key(&sha, br#"{"a":1,"b":2}"#),
            key(&sha, br#"{"b":2,"a":1}"#),
        ) else {
            panic!("keys")
        };
        assert!(a.as_str().starts_with("sha256:"));
        assert_ne!(a, b, "the same JSON with other bytes is another delivery");
        assert_eq!(key(&sha, b""), KeyHeader::Missing);
    }

    proptest::proptest! {
        #![proptest_config(proptest::prelude::ProptestConfig::with_cases(2_000))]

        /// No body makes the JSON key reader panic, and what it refuses it describes briefly.
        #[test]
        fn no_body_panics_the_json_reader(body in proptest::collection::vec(proptest::prelude::any::<u8>(), 0..512)) {
            for pointer in ["/id", "/a/0", "", "/~1"] {
                if let KeyHeader::Malformed(why) = key(&KeySource::JsonPointer(pointer.into()), &body) {
                    proptest::prop_assert!(why.len() < 400, "{why}");
                }
            }
        }

        /// The id a JSON body carries is its key, byte for byte.
        #[test]
        fn the_id_in_a_json_body_is_its_key(id in "[ -~]{1,255}") {
            let body = serde_json::json!({ "id": id, "amount": 1 }).to_string();
            match key(&KeySource::JsonPointer("/id".into()), body.as_bytes()) {
                KeyHeader::Key(found) => proptest::prop_assert_eq!(found.as_str(), id.as_str()),
                other => proptest::prop_assert!(false, "{other:?}"),
            }
        }
    }
}
