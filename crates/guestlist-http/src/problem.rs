//! Errors as `application/problem+json` (RFC 9457) that tell the client what to do.

use bytes::Bytes;
use http::{HeaderValue, Response, StatusCode, header};
use serde_json::json;

use crate::body::{Body, full};

/// Where the problem types are described.
const TYPE_BASE: &str = "https://github.com/guestlist-rs/guestlist/blob/main/docs/problems.md#";

/// A refusal the layer answers itself.
#[derive(Debug, Clone)]
pub(crate) struct Problem {
    pub(crate) status: StatusCode,
    /// The anchor of the type in `docs/problems.md`.
    pub(crate) kind: &'static str,
    pub(crate) title: &'static str,
    pub(crate) detail: String,
    /// Seconds for `Retry-After`.
    pub(crate) retry_after: Option<u64>,
}

impl Problem {
    pub(crate) fn new(
        status: StatusCode,
        kind: &'static str,
        title: &'static str,
        detail: String,
    ) -> Self {
        Self {
            status,
            kind,
            title,
            detail,
            retry_after: None,
        }
    }

    pub(crate) fn retry_after(mut self, seconds: u64) -> Self {
        self.retry_after = Some(seconds);
        self
    }

    pub(crate) fn into_response(self) -> Response<Body> {
        let body = json!({
            "type": format!("{TYPE_BASE}{}", self.kind),
            "title": self.title,
            "status": self.status.as_u16(),
            "detail": self.detail,
        });
        let mut response = Response::new(full(Bytes::from(body.to_string())));
        *response.status_mut() = self.status;
        response.headers_mut().insert(
            header::CONTENT_TYPE,
            HeaderValue::from_static("application/problem+json"),
        );
        if let Some(seconds) = self.retry_after {
            response
                .headers_mut()
                .insert(header::RETRY_AFTER, HeaderValue::from(seconds));
        }
        response
    }
}
