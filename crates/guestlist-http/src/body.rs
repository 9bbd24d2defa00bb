//! Bodies: buffering the request (to fingerprint it) and the response (to store it).

use std::collections::VecDeque;
use std::pin::Pin;

use bytes::{Bytes, BytesMut};
use http_body::{Body as HttpBody, Frame};
use http_body_util::combinators::UnsyncBoxBody;
use http_body_util::{BodyExt, Full, Limited, StreamBody};

/// The error type of every body this crate builds.
pub use guestlist_core::BoxError;

/// The response body of [`Idempotency`](crate::Idempotency): the handler's own, a replay, or a
/// problem.
pub type Body = UnsyncBoxBody<Bytes, BoxError>;

/// A whole body from bytes.
pub(crate) fn full(bytes: Bytes) -> Body {
    Full::new(bytes)
        .map_err(|never| match never {})
        .boxed_unsync()
}

/// Any body as [`Body`].
pub(crate) fn boxed<B>(body: B) -> Body
where
    B: HttpBody<Data = Bytes> + Send + 'static,
    B::Error: Into<BoxError>,
{
    body.map_err(Into::into).boxed_unsync()
}

/// Why a request body could not be read.
#[derive(Debug)]
pub(crate) enum ReadError {
    /// Over the limit.
    TooLarge,
    /// The client's stream failed.
    Broken(BoxError),
}

/// Reads a request body whole, refusing one over `limit` bytes.
pub(crate) async fn read_request<B>(body: B, limit: usize) -> Result<Bytes, ReadError>
where
    B: HttpBody + Send,
    B::Error: Into<BoxError>,
{
    match Limited::new(body, limit).collect().await {
        Ok(collected) => Ok(collected.to_bytes()),
        Err(err) if err.is::<http_body_util::LengthLimitError>() => Err(ReadError::TooLarge),
        Err(err) => Err(ReadError::Broken(err)),
    }
}

/// A response body read up to a limit.
pub(crate) enum Captured<B> {
    /// The whole body, within the limit, and its trailers (sent on, never stored or replayed).
    Whole {
        bytes: Bytes,
        trailers: Option<http::HeaderMap>,
    },
    /// Over the limit: what was read, and the rest still to stream.
    TooLarge { read: Vec<Bytes>, rest: Pin<Box<B>> },
}

impl<B> Captured<B>
where
    B: HttpBody<Data = Bytes> + Send + 'static,
    B::Error: Into<BoxError>,
{
    /// The body to send the client: all of it, trailers included.
    pub(crate) fn into_body(self) -> Body {
        match self {
            Captured::Whole {
                bytes,
                trailers: None,
            } => full(bytes),
            Captured::Whole {
                bytes,
                trailers: Some(trailers),
            } => {
                let frames: [Result<Frame<Bytes>, BoxError>; 2] =
                    [Ok(Frame::data(bytes)), Ok(Frame::trailers(trailers))];
                StreamBody::new(futures_util::stream::iter(frames)).boxed_unsync()
            }
            Captured::TooLarge { read, rest } => resume(read, rest),
        }
    }
}

/// Reads a response body while it fits in `limit` bytes.
pub(crate) async fn capture<B>(body: B, limit: usize) -> Result<Captured<B>, BoxError>
where
    B: HttpBody<Data = Bytes> + Send,
    B::Error: Into<BoxError>,
{
    let mut body = Box::pin(body);
    let mut read = Vec::new();
    let mut len = 0;
    let mut trailers = None;
    while let Some(frame) = body.frame().await {
        let frame = match frame.map_err(Into::into)?.into_data() {
            Ok(data) => data,
            Err(frame) => {
                trailers = frame.into_trailers().ok();
                continue;
            }
        };
        len += frame.len();
        read.push(frame);
        if len > limit {
            return Ok(Captured::TooLarge { read, rest: body });
        }
    }
    let mut whole = BytesMut::with_capacity(len);
    for chunk in read {
        whole.extend_from_slice(&chunk);
    }
    Ok(Captured::Whole {
        bytes: whole.freeze(),
        trailers,
    })
}

/// The chunks already read, then the rest of the stream.
fn resume<B>(read: Vec<Bytes>, rest: Pin<Box<B>>) -> Body
where
    B: HttpBody<Data = Bytes> + Send + 'static,
    B::Error: Into<BoxError>,
{
    let read: VecDeque<Result<Frame<Bytes>, BoxError>> = read
        .into_iter()
        .map(|chunk| Ok(Frame::data(chunk)))
        .collect();
    let head = futures_util::stream::iter(read);
    let tail = http_body_util::BodyStream::new(rest.map_err(Into::into));
    use futures_util::StreamExt;
    StreamBody::new(head.chain(tail)).boxed_unsync()
}
