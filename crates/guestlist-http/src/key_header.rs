//! Reading the `Idempotency-Key` header.

use guestlist_core::IdempotencyKey;
use http::{HeaderMap, HeaderName};

/// What the request says about its key.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum KeyHeader {
    /// No key header.
    Missing,
    /// A key header that is not a key; the text says why.
    Malformed(String),
    /// A well-formed key.
    Key(IdempotencyKey),
}

/// Reads the key from `headers[name]`: a Structured Field string (`"k"`, RFC 9651) or a bare
/// token (`k`), which name the same key.
pub(crate) fn read(headers: &HeaderMap, name: &HeaderName) -> KeyHeader {
    let mut values = headers.get_all(name).iter();
    let Some(value) = values.next() else {
        return KeyHeader::Missing;
    };
    if values.next().is_some() {
        return KeyHeader::Malformed(format!("send one {name} header, not several"));
    }
    match parse(value.as_bytes()) {
        Ok(key) => KeyHeader::Key(key),
        Err(why) => KeyHeader::Malformed(why),
    }
}

/// Parses one header value into a key, or says what is wrong with it.
pub fn parse(value: &[u8]) -> Result<IdempotencyKey, String> {
    let value = value.trim_ascii();
    let text = if value.first() == Some(&b'"') {
        let item: sfv::Item = sfv::Parser::new(value).parse().map_err(|err| {
            format!("the quoted key is not a valid Structured Field string ({err})")
        })?;
        match item.bare_item {
            sfv::BareItem::String(s) => s.as_str().to_owned(),
            _ => return Err("the key must be a string".to_owned()),
        }
    } else {
        if let Some(bad) = value
            .iter()
            .find(|b| !b.is_ascii_graphic() || matches!(b, b'"' | b'\\'))
        {
            return Err(format!(
                "the key has byte 0x{bad:02x}: send printable ASCII without spaces, or quote it as a string (\"…\")"
            ));
        }
        std::str::from_utf8(value)
            .expect("graphic ASCII is UTF-8")
            .to_owned()
    };
    IdempotencyKey::new(text).map_err(|err| err.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn quoted_and_bare_name_the_same_key() {
        assert_eq!(parse(b"\"k-1\"").unwrap(), parse(b"k-1").unwrap());
        assert_eq!(parse(b"  k-1 ").unwrap().as_str(), "k-1");
        assert_eq!(parse(br#""a \"b\" c""#).unwrap().as_str(), r#"a "b" c"#);
        assert_eq!(
            parse(b"8e03978e-40d5-43e8-bc93-6894a57f9324")
                .unwrap()
                .as_str(),
            "8e03978e-40d5-43e8-bc93-6894a57f9324",
            "a UUID is not a Structured Field token, but it is a key"
        );
    }

    #[test]
    fn refuses_what_is_not_a_key() {
        for bad in [
            &b""[..],
            b"\"\"",
            b"\"open",
            b"a b",
            b"a\\b",
            b"\"\xff\"",
            b"a\"b",
        ] {
            assert!(
                parse(bad).is_err(),
                "{:?} was accepted",
                String::from_utf8_lossy(bad)
            );
        }
        assert!(parse(&vec![b'k'; 256]).unwrap_err().contains("256 bytes"));
        assert!(parse(&vec![b'k'; 255]).is_ok());
    }
}
