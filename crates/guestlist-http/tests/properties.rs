//! Properties of the key parser, the forwarded key and the fingerprint, over inputs nobody
//! thought to write down, plus a corpus of hostile header values kept beside this file. Bounded
//! (2,000 cases a property) so that it runs in CI with the rest.

use guestlist_core::{Fingerprint, IdempotencyKey, Scope};
use guestlist_http::key_header::parse;
use proptest::prelude::*;

proptest! {
    #![proptest_config(ProptestConfig::with_cases(2_000))]

    /// No header value makes the parser panic; whatever it accepts is a valid key.
    #[test]
    fn no_header_value_panics(value in proptest::collection::vec(any::<u8>(), 0..400)) {
        if let Ok(key) = parse(&value) {
            prop_assert!((1..=255).contains(&key.as_str().len()));
            prop_assert!(key.as_str().bytes().all(|b| (0x20..=0x7e).contains(&b)));
        }
    }

    /// A bare key and the same key quoted as a Structured Field string are one key.
    #[test]
    fn quoted_and_bare_are_one_key(key in "[!#-\\[\\]-~]{1,255}") {
        let quoted = format!("\"{key}\"");
        prop_assert_eq!(parse(key.as_bytes()).unwrap(), parse(quoted.as_bytes()).unwrap());
    }

    /// Two bodies that differ in one byte never share a fingerprint.
    #[test]
    fn one_changed_byte_changes_the_fingerprint(
        body in proptest::collection::vec(any::<u8>(), 1..2048),
        at in any::<prop::sample::Index>(),
        delta in 1u8..=255,
    ) {
        let mut other = body.clone();
        let i = at.index(body.len());
        other[i] = other[i].wrapping_add(delta);
        let a = Fingerprint::builder("POST", "/payments").body(&body);
        let b = Fingerprint::builder("POST", "/payments").body(&other);
        prop_assert_ne!(a, b);
    }

    /// A different path or query never shares a fingerprint with the same body.
    #[test]
    fn another_path_changes_the_fingerprint(path in "/[a-z0-9/?=&]{0,40}", body in proptest::collection::vec(any::<u8>(), 0..64)) {
        let a = Fingerprint::builder("POST", &path).body(&body);
        let b = Fingerprint::builder("POST", &format!("{path}x")).body(&body);
        prop_assert_ne!(a, b);
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(2_000))]

    /// Every key, sent on as `header_value` says, parses back to the very same key: a second
    /// guestlist hop never refuses (or mistakes) a key the first accepted.
    #[test]
    fn a_forwarded_key_parses_back_to_itself(key in "[ -~]{1,255}") {
        let key = IdempotencyKey::new(key).unwrap();
        let value = key.header_value();
        prop_assert!(http::HeaderValue::from_str(&value).is_ok(), "{value:?} is a header value");
        prop_assert_eq!(parse(value.as_bytes()).unwrap(), key);
    }

    /// Two (scope, key) pairs never share a qualified name, however their colons fall.
    #[test]
    fn qualified_names_never_collide(
        scope_a in "[a:]{1,6}", key_a in "[b:]{1,6}",
        scope_b in "[a:]{1,6}", key_b in "[b:]{1,6}",
    ) {
        let name = |scope: &str, key: &str| {
            Scope::new(scope).unwrap().qualify(&IdempotencyKey::new(key).unwrap())
        };
        if (&scope_a, &key_a) != (&scope_b, &key_b) {
            prop_assert_ne!(name(&scope_a, &key_a), name(&scope_b, &key_b));
        }
    }
}

/// The hostile header values kept in `tests/corpus/keys.txt`, one per line (`\xNN` escapes):
/// each is refused or parsed to a key that survives forwarding.
#[test]
fn the_corpus_of_hostile_keys() {
    let corpus = include_str!("corpus/keys.txt");
    let mut seen = 0;
    for line in corpus
        .lines()
        .filter(|l| !l.starts_with('#') && !l.is_empty())
    {
        let value = unescape(line);
        if let Ok(key) = parse(&value) {
            assert_eq!(parse(key.header_value().as_bytes()).unwrap(), key, "{line}");
        }
        seen += 1;
    }
    assert!(seen >= 20, "the corpus is there: {seen} values");
}

/// `\xNN` escapes into bytes.
fn unescape(line: &str) -> Vec<u8> {
    let mut bytes = Vec::new();
    let mut rest = line.as_bytes();
    while let Some((&b, tail)) = rest.split_first() {
        if b == b'\\' && tail.first() == Some(&b'x') && tail.len() >= 3 {
            let hex = std::str::from_utf8(&tail[1..3]).unwrap();
            bytes.push(u8::from_str_radix(hex, 16).unwrap());
            rest = &tail[3..];
        } else {
            bytes.push(b);
            rest = tail;
        }
    }
    bytes
}
