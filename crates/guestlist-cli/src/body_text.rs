//! A message body as an operator reads it on a terminal or a page: text where it is UTF-8
//! (control characters escaped, so that a body cannot move the cursor or forge a line),
//! hexadecimal where it is not.

/// `bytes` as one printable string: UTF-8 text with its control characters escaped (`\n`,
/// `\u{1b}`), or `hex:` and the bytes in hexadecimal.
pub(crate) fn body_text(bytes: &[u8]) -> String {
    match std::str::from_utf8(bytes) {
        Ok(text) => text
            .chars()
            .flat_map(|c| {
                if c.is_control() {
                    c.escape_default().collect::<Vec<_>>()
                } else {
                    vec![c]
                }
            })
            .collect(),
        // Cut inside a character (a preview's last bytes): the text up to it.
        Err(err) if err.error_len().is_none() && err.valid_up_to() > 0 => {
            body_text(&bytes[..err.valid_up_to()])
        }
        Err(_) => format!("hex:{}", hex::encode(bytes)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn text_stays_text_and_control_characters_are_escaped() {
        assert_eq!(body_text(br#"{"order": 42}"#), r#"{"order": 42}"#);
        assert_eq!(body_text(b"a\nb\x1b[2J"), "a\\nb\\u{1b}[2J");
        assert_eq!(body_text("caf\u{e9}".as_bytes()), "caf\u{e9}");
        assert_eq!(
            body_text(&"caf\u{e9}".as_bytes()[..4]),
            "caf",
            "cut mid-character"
        );
        assert_eq!(body_text(&[0xff, 0x00]), "hex:ff00");
    }
}
