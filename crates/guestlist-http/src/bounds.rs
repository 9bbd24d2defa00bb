//! The bounds the layer puts on what it wraps, named once: the handler's service and the two
//! bodies. Each is implemented for every type that meets it; name them in your own generic
//! code instead of repeating the list.

use bytes::Bytes;
use http::{Request, Response};
use http_body::Body as HttpBody;
use tower_service::Service;

use crate::body::BoxError;

/// A request body the layer can read, and rebuild from the bytes it read.
pub trait RequestBody:
    HttpBody<Data: Send, Error: Into<BoxError>> + From<Bytes> + Send + 'static
{
}

impl<B> RequestBody for B where
    B: HttpBody<Data: Send, Error: Into<BoxError>> + From<Bytes> + Send + 'static
{
}

/// A response body the layer can read, to store it.
pub trait ResponseBody: HttpBody<Data = Bytes, Error: Into<BoxError>> + Send + 'static {}

impl<B> ResponseBody for B where B: HttpBody<Data = Bytes, Error: Into<BoxError>> + Send + 'static {}

/// A handler the layer can wrap: a service from requests with a `ReqBody` to responses with a
/// `ResBody`, whose futures and errors cross tasks.
pub trait Handler<ReqBody, ResBody>:
    Service<Request<ReqBody>, Response = Response<ResBody>, Future: Send, Error: Send + 'static>
    + Send
    + 'static
{
}

impl<S, ReqBody, ResBody> Handler<ReqBody, ResBody> for S where
    S: Service<Request<ReqBody>, Response = Response<ResBody>, Future: Send, Error: Send + 'static>
        + Send
        + 'static
{
}
