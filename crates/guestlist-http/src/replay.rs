//! A stored response sent again, byte for byte, marked as a replay.

use bytes::Bytes;
use guestlist_core::{StoredBody, StoredResponse};
use http::{HeaderValue, Response, StatusCode, header};

use crate::body::{self, Body};

/// Header set on every replayed response.
pub(crate) const REPLAYED: &str = "idempotent-replayed";
/// Header set on a replay whose body was too large to store.
pub(crate) const BODY_OMITTED: &str = "idempotent-body-omitted";

/// The stored response again, byte for byte, marked as a replay.
pub(crate) fn replay(stored: StoredResponse, limit: usize) -> Response<Body> {
    let (body, omitted) = match stored.body {
        StoredBody::Bytes(bytes) => (Bytes::from(bytes), false),
        StoredBody::TooLarge => (Bytes::new(), true),
    };
    let mut response = Response::new(body::full(body));
    *response.status_mut() = StatusCode::from_u16(stored.status).unwrap_or(StatusCode::OK);
    let headers = response.headers_mut();
    for (name, value) in stored.headers {
        let (Ok(name), Ok(value)) = (
            header::HeaderName::from_bytes(name.as_bytes()),
            HeaderValue::from_bytes(&value),
        ) else {
            continue;
        };
        if omitted && name == header::CONTENT_TYPE {
            continue; // there is no body for it to describe
        }
        headers.append(name, value);
    }
    headers.insert(REPLAYED, HeaderValue::from_static("true"));
    if omitted {
        tracing::info!(
            limit,
            "replaying a response whose body was too large to store"
        );
        headers.insert(BODY_OMITTED, HeaderValue::from_static("too-large"));
    }
    response
}
