//! Properties of the key parser and the fingerprint, over inputs nobody thought to write down.

use guestlist_core::Fingerprint;
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
