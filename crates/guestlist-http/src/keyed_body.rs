//! A keyed request's body, read whole within the limit (it is fingerprinted and may hold the
//! key), or the refusal to answer instead.

use bytes::Bytes;
use http::header;
use http::request::Parts;
use http_body::Body as HttpBody;

use crate::body::{BoxError, ReadError, read_request};
use crate::problem::Problem;

/// Reads a keyed request's body within the limit, or the refusal to send instead.
pub(crate) async fn read<B>(limit: usize, parts: &Parts, body: B) -> Result<Bytes, Problem>
where
    B: HttpBody + Send,
    B::Data: Send,
    B::Error: Into<BoxError>,
{
    let declared_too_large = parts
        .headers
        .get(header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok()?.parse::<u64>().ok())
        .is_some_and(|len| len > limit as u64);
    let bytes = match declared_too_large {
        true => Err(ReadError::TooLarge),
        false => read_request(body, limit).await,
    };
    bytes.map_err(|err| match err {
        ReadError::TooLarge => Problem::body_too_large(format!(
            "send at most {limit} bytes; nothing was run and the key is still unused"
        )),
        ReadError::Broken(err) => Problem::body_unreadable(format!(
            "the body broke off ({err}); retry with the same key"
        )),
    })
}
