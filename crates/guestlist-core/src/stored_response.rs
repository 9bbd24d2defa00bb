//! A response kept for replay.

/// The part of a response that is stored and replayed byte for byte: the status, the headers
/// on the store's allow-list, and the body.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StoredResponse {
    /// The HTTP status code.
    pub status: u16,
    /// Header names (lowercase) and raw values, in the order the handler set them.
    pub headers: Vec<(String, Vec<u8>)>,
    /// The body, or the fact that it was too large to keep.
    pub body: StoredBody,
}

/// A stored response's body.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum StoredBody {
    /// The exact bytes the first attempt sent.
    Bytes(Vec<u8>),
    /// The body was over the store's limit and was not kept: a retry learns that the request
    /// ran (and with which status), and is told it cannot be replayed; it never runs again.
    TooLarge,
}

impl StoredBody {
    /// The bytes to store: `None` for a body too large to keep (stored as SQL `NULL`).
    pub fn stored_bytes(&self) -> Option<&[u8]> {
        match self {
            StoredBody::Bytes(bytes) => Some(bytes),
            StoredBody::TooLarge => None,
        }
    }
}

impl StoredResponse {
    /// The headers as stored, in [`header_lines`](crate::header_lines)' form.
    pub fn encode_headers(&self) -> Vec<u8> {
        crate::header_lines::encode(
            self.headers
                .iter()
                .map(|(name, value)| (name.as_str(), value)),
        )
    }

    /// Reads headers written by [`StoredResponse::encode_headers`].
    pub fn decode_headers(stored: &[u8]) -> Vec<(String, Vec<u8>)> {
        crate::header_lines::decode(stored)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn headers_round_trip_with_raw_bytes() {
        let response = StoredResponse {
            status: 201,
            headers: vec![
                ("content-type".into(), b"application/json".to_vec()),
                ("x-odd".into(), b"a: b \xff".to_vec()),
                ("empty".into(), Vec::new()),
            ],
            body: StoredBody::Bytes(b"{}".to_vec()),
        };
        let decoded = StoredResponse::decode_headers(&response.encode_headers());
        assert_eq!(decoded, response.headers);
    }
}
