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

/// One named constructor per refusal, each a section of `docs/problems.md` with its status and
/// title, so that a refusal is written once and every answer of a kind reads alike.
macro_rules! refusals {
    ($($(#[$doc:meta])* $name:ident => $status:ident, $kind:literal, $title:literal;)*) => {
        impl Problem {
            $(
                $(#[$doc])*
                pub(crate) fn $name(detail: impl Into<String>) -> Self {
                    Self::new(StatusCode::$status, $kind, $title, detail.into())
                }
            )*
        }

        /// Every kind a constructor above answers with: each has its section in the docs.
        #[cfg(test)]
        const KINDS: &[&str] = &[$($kind),*];
    };
}

refusals! {
    /// No key where the endpoint requires one.
    key_required => BAD_REQUEST, "key-required", "An idempotency key is required";
    /// A key that is no key.
    key_malformed => BAD_REQUEST, "key-malformed", "The idempotency key is malformed";
    /// A key with nothing to scope it by.
    no_scope => BAD_REQUEST, "no-scope", "The idempotency key cannot be scoped";
    /// A body over the limit.
    body_too_large => PAYLOAD_TOO_LARGE, "body-too-large", "The request body is too large";
    /// A body that broke off while it was read.
    body_unreadable => BAD_REQUEST, "body-unreadable", "The request body could not be read";
    /// The first attempt with this key still runs (with `Retry-After`).
    key_in_flight => CONFLICT, "key-in-flight", "A request with this key is in progress";
    /// A retry took over from an attempt past its lease.
    attempt_superseded => CONFLICT, "attempt-superseded", "A retry took over this request";
    /// The handler's response broke off.
    response_broken => INTERNAL_SERVER_ERROR, "response-broken", "The response could not be produced";
    /// The key store failed (with `Retry-After`).
    store_unavailable => SERVICE_UNAVAILABLE, "store-unavailable", "The idempotency store is unavailable";
    /// `IdempotentTx` on a route without the transactional layer.
    #[cfg_attr(not(all(feature = "sql", feature = "axum")), allow(dead_code))]
    transaction_unavailable => INTERNAL_SERVER_ERROR, "transaction-unavailable", "No transaction for this handler";
    /// The scope has as many keys in flight as allowed.
    too_many_in_flight => TOO_MANY_REQUESTS, "too-many-in-flight", "Too many idempotency keys for this client";
    /// The scope holds as many keys as allowed.
    too_many_keys => TOO_MANY_REQUESTS, "too-many-keys", "Too many idempotency keys for this client";
    /// The handler panicked while it held the key.
    handler_panicked => INTERNAL_SERVER_ERROR, "handler-panicked", "The request failed";
}

impl Problem {
    /// The key was used for another request: 422, or the status the layer is configured with.
    pub(crate) fn key_reused(status: StatusCode, detail: impl Into<String>) -> Self {
        Self::new(
            status,
            "key-reused",
            "The idempotency key was used for another request",
            detail.into(),
        )
    }

    fn new(status: StatusCode, kind: &'static str, title: &'static str, detail: String) -> Self {
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

#[cfg(test)]
mod tests {
    /// Every refusal the layer answers has its section in `docs/problems.md`, where its `type`
    /// points.
    #[test]
    fn every_kind_is_described() {
        let page = include_str!("../../../docs/problems.md");
        for kind in super::KINDS.iter().chain(&["key-reused"]) {
            assert!(
                page.contains(&format!("\n## {kind}\n")),
                "docs/problems.md lacks ## {kind}"
            );
        }
    }
}
