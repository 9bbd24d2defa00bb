//! The stored form of headers, one `name: value\r\n` line each, in order: how stored responses
//! keep theirs and how the outbox's `headers` column holds a message's, so that a service in
//! another language writing the outbox writes the same lines.

/// The headers as stored lines. Values never hold CR or LF (HTTP forbids them in header
/// values, and the outbox turns them into spaces before it stores a header).
///
/// ```
/// let stored = guestlist_core::header_lines::encode([("content-type", b"application/json")]);
/// assert_eq!(stored, b"content-type: application/json\r\n");
/// ```
pub fn encode<'a, V: AsRef<[u8]>>(headers: impl IntoIterator<Item = (&'a str, V)>) -> Vec<u8> {
    let mut out = Vec::new();
    for (name, value) in headers {
        out.extend_from_slice(name.as_bytes());
        out.extend_from_slice(b": ");
        out.extend_from_slice(value.as_ref());
        out.extend_from_slice(b"\r\n");
    }
    out
}

/// Reads lines written by [`encode`]. A line ended by a bare LF reads the same; a line without
/// `: ` is no header and is skipped. Names that are not UTF-8 are read lossily.
///
/// ```
/// let headers = guestlist_core::header_lines::decode(b"a: 1\r\nb: 2\n");
/// assert_eq!(headers, [("a".to_owned(), b"1".to_vec()), ("b".to_owned(), b"2".to_vec())]);
/// ```
pub fn decode(stored: &[u8]) -> Vec<(String, Vec<u8>)> {
    stored
        .split(|&b| b == b'\n')
        .filter_map(|line| {
            let line = line.strip_suffix(b"\r").unwrap_or(line);
            let colon = line.windows(2).position(|w| w == b": ")?;
            let name = String::from_utf8_lossy(&line[..colon]).into_owned();
            Some((name, line[colon + 2..].to_vec()))
        })
        .collect()
}
