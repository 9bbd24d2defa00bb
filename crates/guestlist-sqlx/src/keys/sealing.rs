//! Stored response bodies, sealed at rest: an operator who can read the key table reads no
//! response it holds.
//!
//! AES-256-GCM (from `ring`) with a random 96-bit nonce per body, bound to its row by the scope
//! and key as associated data (a body copied into another row does not open). Each sealed body
//! starts with the id of the key that sealed it, so keys rotate without rewriting rows: seal with
//! the newest key, open with whichever the row names. Bodies stored before sealing was turned on
//! are read as they are.

use std::fmt;

use guestlist_core::{IdempotencyKey, Scope};
use ring::aead::{AES_256_GCM, Aad, LessSafeKey, NONCE_LEN, Nonce, UnboundKey};

use crate::Error;

/// What a sealed body starts with, before its key id's length and the id.
const MAGIC: &[u8] = b"glseal1";

/// The keys that seal and open stored bodies: the first seals, every one opens.
///
/// ```
/// use guestlist_sqlx::Sealing;
/// let keys = format!("2026-11:{},2026-05:{}", "ab".repeat(32), "cd".repeat(32));
/// let sealing = Sealing::parse(&keys)?;
/// assert_eq!(sealing.sealing_key_id(), "2026-11");
/// # Ok::<(), guestlist_sqlx::Error>(())
/// ```
#[derive(Clone)]
pub struct Sealing {
    keys: Vec<(String, std::sync::Arc<LessSafeKey>)>,
}

impl fmt::Debug for Sealing {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let ids: Vec<&str> = self.keys.iter().map(|(id, _)| id.as_str()).collect();
        f.debug_struct("Sealing").field("key_ids", &ids).finish()
    }
}

impl Sealing {
    /// Keys written `id:hex,id:hex,…`: each id 1 to 64 letters, digits, `-`, `_` or `.`, each key
    /// 32 bytes as 64 hex digits (`openssl rand -hex 32`). The first seals new bodies.
    pub fn parse(text: &str) -> Result<Self, Error> {
        let mut keys = Vec::new();
        for entry in text.split(',').map(str::trim).filter(|e| !e.is_empty()) {
            let (id, hex_key) = entry.split_once(':').ok_or_else(|| {
                invalid("each sealing key is id:hex (e.g. 2026-11:<64 hex digits>)".to_owned())
            })?;
            let id_ok = (1..=64).contains(&id.len())
                && id
                    .bytes()
                    .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.'));
            if !id_ok {
                return Err(invalid(format!(
                    "sealing key id {id:?}: use 1 to 64 letters, digits, '-', '_' or '.'"
                )));
            }
            let bytes = hex::decode(hex_key.trim())
                .ok()
                .filter(|b| b.len() == 32)
                .ok_or_else(|| {
                    invalid(format!(
                        "sealing key {id}: 32 bytes as 64 hex digits (openssl rand -hex 32)"
                    ))
                })?;
            let key = UnboundKey::new(&AES_256_GCM, &bytes)
                .map_err(|_| invalid(format!("sealing key {id} is not an AES-256 key")))?;
            keys.push((id.to_owned(), std::sync::Arc::new(LessSafeKey::new(key))));
        }
        if keys.is_empty() {
            return Err(invalid(
                "no sealing key: give at least one id:hex (openssl rand -hex 32)".to_owned(),
            ));
        }
        Ok(Self { keys })
    }

    /// The id of the key that seals new bodies.
    pub fn sealing_key_id(&self) -> &str {
        &self.keys[0].0
    }

    /// `body`, sealed for the row of `scope` and `key`.
    pub(crate) fn seal(
        &self,
        scope: &Scope,
        key: &IdempotencyKey,
        body: &[u8],
    ) -> Result<Vec<u8>, Error> {
        let (id, sealer) = &self.keys[0];
        let mut nonce = [0u8; NONCE_LEN];
        getrandom::fill(&mut nonce)
            .map_err(|err| invalid(format!("no randomness for a nonce: {err}")))?;
        let mut sealed =
            Vec::with_capacity(MAGIC.len() + 1 + id.len() + NONCE_LEN + body.len() + 16);
        sealed.extend_from_slice(MAGIC);
        sealed.push(id.len() as u8);
        sealed.extend_from_slice(id.as_bytes());
        sealed.extend_from_slice(&nonce);
        let mut in_out = body.to_vec();
        sealer
            .seal_in_place_append_tag(
                Nonce::assume_unique_for_key(nonce),
                Aad::from(row_of(scope, key)),
                &mut in_out,
            )
            .map_err(|_| invalid("sealing a stored body failed".to_owned()))?;
        sealed.extend_from_slice(&in_out);
        Ok(sealed)
    }

    /// The body stored as `stored` for the row of `scope` and `key`: opened if sealed, as it is
    /// if it was stored before sealing was turned on.
    pub(crate) fn open(
        &self,
        scope: &Scope,
        key: &IdempotencyKey,
        stored: Vec<u8>,
    ) -> Result<Vec<u8>, Error> {
        let Some(rest) = stored.strip_prefix(MAGIC) else {
            return Ok(stored);
        };
        let broken = || {
            invalid(format!(
                "the stored body of key {key} is sealed but cut short"
            ))
        };
        let (&id_len, rest) = rest.split_first().ok_or_else(broken)?;
        let id_len = usize::from(id_len);
        if rest.len() < id_len + NONCE_LEN {
            return Err(broken());
        }
        let (id, rest) = rest.split_at(id_len);
        let (nonce, sealed) = rest.split_at(NONCE_LEN);
        let id = String::from_utf8_lossy(id);
        let (_, opener) = self
            .keys
            .iter()
            .find(|(known, _)| *known == id)
            .ok_or_else(|| {
                invalid(format!(
                    "the stored body of key {key} was sealed with key id {id}, which is not among \
                     the sealing keys: add it back (after the newest) until its rows expire"
                ))
            })?;
        let nonce = Nonce::try_assume_unique_for_key(nonce).map_err(|_| broken())?;
        let mut in_out = sealed.to_vec();
        let opened = opener
            .open_in_place(nonce, Aad::from(row_of(scope, key)), &mut in_out)
            .map_err(|_| {
                invalid(format!(
                    "the stored body of key {key} does not open with key id {id}: it was changed, \
                     or copied from another row"
                ))
            })?;
        Ok(opened.to_vec())
    }
}

/// A secret that turns each client's raw idempotency key into a keyed hash before it is stored,
/// so that reading the key table reveals no client's keys: `hmac:` + the hex HMAC-SHA-256 of
/// the key. Unlike sealing keys it never rotates: another secret names every key anew.
///
/// ```
/// use guestlist_sqlx::KeyHashing;
/// let hashing = KeyHashing::parse(&"ab".repeat(32))?;
/// # Ok::<(), guestlist_sqlx::Error>(())
/// ```
#[derive(Clone)]
pub struct KeyHashing(std::sync::Arc<ring::hmac::Key>);

impl fmt::Debug for KeyHashing {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("KeyHashing(..)")
    }
}

impl KeyHashing {
    /// A secret of 32 bytes as 64 hex digits (`openssl rand -hex 32`).
    pub fn parse(text: &str) -> Result<Self, Error> {
        let secret = hex::decode(text.trim())
            .ok()
            .filter(|b| b.len() == 32)
            .ok_or_else(|| {
                invalid(
                    "the key-hashing secret is 32 bytes as 64 hex digits (openssl rand -hex 32)"
                        .to_owned(),
                )
            })?;
        Ok(Self(std::sync::Arc::new(ring::hmac::Key::new(
            ring::hmac::HMAC_SHA256,
            &secret,
        ))))
    }

    /// The key as it is stored.
    pub(crate) fn hash(&self, key: &IdempotencyKey) -> IdempotencyKey {
        let tag = ring::hmac::sign(&self.0, key.as_str().as_bytes());
        IdempotencyKey::new(format!("hmac:{}", hex::encode(tag.as_ref())))
            .expect("hmac: and 64 hex digits is a key")
    }
}

/// The associated data that binds a sealed body to its row.
fn row_of(scope: &Scope, key: &IdempotencyKey) -> Vec<u8> {
    scope.qualify(key).into_bytes()
}

fn invalid(why: String) -> Error {
    Error::Sealing(why)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sealing(keys: &str) -> Sealing {
        Sealing::parse(keys).unwrap()
    }

    #[test]
    fn sealed_bodies_open_only_in_their_row_and_with_a_known_key() {
        let (a, b) = (
            format!("a:{}", "11".repeat(32)),
            format!("b:{}", "22".repeat(32)),
        );
        let scope = Scope::new("tenant").unwrap();
        let key = IdempotencyKey::new("k-1").unwrap();
        let old = sealing(&a);
        let sealed = old.seal(&scope, &key, b"{\"charge\":\"ch_1\"}").unwrap();
        assert!(
            !sealed.windows(6).any(|w| w == b"charge"),
            "no plaintext at rest"
        );
        assert_eq!(
            old.open(&scope, &key, sealed.clone()).unwrap(),
            b"{\"charge\":\"ch_1\"}"
        );

        let rotated = sealing(&format!("{b},{a}"));
        assert_eq!(rotated.sealing_key_id(), "b");
        assert_eq!(
            rotated.open(&scope, &key, sealed.clone()).unwrap(),
            b"{\"charge\":\"ch_1\"}",
            "rows sealed with the older key still open"
        );
        let other = IdempotencyKey::new("k-2").unwrap();
        assert!(
            old.open(&scope, &other, sealed.clone()).is_err(),
            "copied into another row"
        );
        let forgot = sealing(&b).open(&scope, &key, sealed).unwrap_err();
        assert!(forgot.to_string().contains("key id a"), "{forgot}");
        assert_eq!(
            old.open(&scope, &key, b"plain, from before".to_vec())
                .unwrap(),
            b"plain, from before",
            "bodies stored before sealing read as they are"
        );
    }

    #[test]
    fn a_hashed_key_is_stable_distinct_and_a_key() {
        let hashing = KeyHashing::parse(&"3c".repeat(32)).unwrap();
        let key = |k| IdempotencyKey::new(k).unwrap();
        let stored = hashing.hash(&key("order-1"));
        assert!(stored.as_str().starts_with("hmac:") && stored.as_str().len() == 69);
        assert_eq!(
            stored,
            hashing.hash(&key("order-1")),
            "the same key, the same row"
        );
        assert_ne!(stored, hashing.hash(&key("order-2")));
        let other = KeyHashing::parse(&"c3".repeat(32)).unwrap();
        assert_ne!(
            stored,
            other.hash(&key("order-1")),
            "keyed: no secret, no lookup"
        );
        assert!(KeyHashing::parse("abcd").is_err());
    }

    #[test]
    fn keys_must_be_written_right() {
        for bad in [
            "",
            "nohex",
            "a:abcd",
            &format!("bad id:{}", "11".repeat(32)),
        ] {
            assert!(Sealing::parse(bad).is_err(), "{bad:?}");
        }
    }
}
