//! Setting `Idempotency-Key` on outbound requests.

use std::time::{Duration, SystemTime};

use guestlist_core::{Deferral, trace_context};
use http::Extensions;
use reqwest::header::{HeaderName, HeaderValue};
use reqwest::{Method, Request, Response, StatusCode};
use reqwest_middleware::{Middleware, Next, Result};
use tracing::Instrument;

/// The wait for a "not yet" that names none (a 429 or 503 without `Retry-After`, a refused
/// connection, a request that got no answer).
const DEFAULT_WAIT: Duration = Duration::from_secs(1);

/// Names the step of an outbound request, for its derived key (default: the named step it is
/// made in ([`scope_step`](crate::scope_step)), else its method and path).
///
/// Two calls to one endpoint within one piece of work need two steps, or they share a key:
/// `client.post(url).with_extension(Step("refund-1".into()))`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Step(pub String);

/// A reqwest-middleware middleware that gives every mutating outbound request the idempotency
/// key of its step within the work in progress.
///
/// Add it **before** any retry middleware: it sets the key once, and every retry resends the same
/// request with it. A request that already carries the header keeps its own key. A mutating
/// request made outside any work in progress is refused, unless
/// [`CarryKey::allow_without_key`] says otherwise: a key invented on the spot would be fresh on
/// every retry and protect nothing.
///
/// A downstream "not yet" becomes a [`Deferral`] error, recorded for the runtime with
/// [`defer`](crate::defer): a 409 with `Retry-After` (another attempt with this key is in
/// flight), a 429 or a 503 (with or without `Retry-After`), a refused connection, or a request
/// that went out and got no answer (the connection closed or reset first, or the client's
/// timeout ran out: the carried key makes asking again safe). A broker consumer then hands the
/// message back for that long without counting a failure. Turn it off with
/// [`CarryKey::defer_not_yet`].
#[derive(Debug, Clone)]
pub struct CarryKey {
    header: http::HeaderName,
    methods: Vec<Method>,
    allow_without_key: bool,
    defer_not_yet: bool,
}

impl Default for CarryKey {
    fn default() -> Self {
        Self {
            header: http::HeaderName::from_static("idempotency-key"),
            methods: vec![Method::POST, Method::PATCH, Method::PUT, Method::DELETE],
            allow_without_key: false,
            defer_not_yet: true,
        }
    }
}

impl CarryKey {
    /// Keys on POST, PATCH, PUT and DELETE, in `Idempotency-Key`.
    pub fn new() -> Self {
        Self::default()
    }

    /// The header to set (default `Idempotency-Key`).
    pub fn header_name(mut self, name: http::HeaderName) -> Self {
        self.header = name;
        self
    }

    /// The methods that get a key (default POST, PATCH, PUT, DELETE).
    pub fn methods(mut self, methods: impl IntoIterator<Item = Method>) -> Self {
        self.methods = methods.into_iter().collect();
        self
    }

    /// Lets mutating requests without a key in context through, unkeyed.
    pub fn allow_without_key(mut self, allow: bool) -> Self {
        self.allow_without_key = allow;
        self
    }

    /// Whether a downstream "not yet" becomes a [`Deferral`] error (default on); off, the
    /// response (or the connection error) reaches the caller as it came.
    pub fn defer_not_yet(mut self, on: bool) -> Self {
        self.defer_not_yet = on;
        self
    }
}

/// The deferral a downstream's answer asks for, if it says "not yet".
fn not_yet(method: &Method, url: &str, outcome: &Result<Response>) -> Option<Deferral> {
    match outcome {
        Ok(response) => {
            let status = response.status();
            let retry_after = response
                .headers()
                .get(reqwest::header::RETRY_AFTER)
                .and_then(|value| retry_after(value.to_str().ok()?));
            let after = match status {
                StatusCode::CONFLICT => retry_after?,
                StatusCode::TOO_MANY_REQUESTS | StatusCode::SERVICE_UNAVAILABLE => {
                    retry_after.unwrap_or(DEFAULT_WAIT)
                }
                _ => return None,
            };
            Some(Deferral::new(
                after,
                format!("{method} {url} answered {status}: not yet"),
            ))
        }
        Err(reqwest_middleware::Error::Reqwest(err)) if err.is_connect() => Some(Deferral::new(
            DEFAULT_WAIT,
            format!("{method} {url}: cannot connect ({err})"),
        )),
        // The request went out and no answer came: the connection closed or was reset first,
        // or the client's timeout ran out. Whether the downstream did the work is unknown, and
        // the carried key makes asking again safe: its inbox answers a repeat with the first
        // result.
        Err(reqwest_middleware::Error::Reqwest(err)) if err.is_timeout() || err.is_request() => {
            Some(Deferral::new(
                DEFAULT_WAIT,
                format!("{method} {url}: no answer ({err})"),
            ))
        }
        Err(_) => None,
    }
}

/// A `Retry-After` value: seconds, or an HTTP date.
fn retry_after(value: &str) -> Option<Duration> {
    if let Ok(seconds) = value.trim().parse::<u64>() {
        return Some(Duration::from_secs(seconds));
    }
    let at = httpdate::parse_http_date(value).ok()?;
    Some(at.duration_since(SystemTime::now()).unwrap_or_default())
}

/// The default step of a request: its method and path, folded into the step alphabet.
fn default_step(request: &Request) -> String {
    let raw = format!("{}{}", request.method(), request.url().path());
    raw.chars()
        .map(|c| match c {
            '/' => '.',
            c if c.is_ascii_alphanumeric() || matches!(c, '_' | '-' | '.') => {
                c.to_ascii_lowercase()
            }
            _ => '_',
        })
        .collect()
}

#[async_trait::async_trait]
impl Middleware for CarryKey {
    async fn handle(
        &self,
        mut request: Request,
        extensions: &mut Extensions,
        next: Next<'_>,
    ) -> Result<Response> {
        let span = tracing::info_span!(
            "guestlist.carry",
            otel.name = %request.method(),
            otel.kind = "client",
            http.request.method = %request.method(),
            url.full = %request.url(),
            guestlist.step = tracing::field::Empty,
            guestlist.key = tracing::field::Empty,
            http.response.status_code = tracing::field::Empty,
        );
        if self.methods.contains(request.method()) && !request.headers().contains_key(&self.header)
        {
            // Its own `Step`, else the named step it is made in, else its method and path.
            let step = extensions
                .get::<Step>()
                .map(|step| step.0.clone())
                .or_else(|| crate::current_step().map(|step| step.to_string()))
                .unwrap_or_else(|| default_step(&request));
            span.record("guestlist.step", step.as_str());
            match crate::key_for(&step) {
                Ok(key) => {
                    let key = key.header_value();
                    let value = HeaderValue::from_str(&key)
                        .map_err(reqwest_middleware::Error::middleware)?;
                    span.record("guestlist.key", &*key);
                    request.headers_mut().insert(self.header.clone(), value);
                }
                Err(no_key) if !self.allow_without_key => {
                    return Err(reqwest_middleware::Error::middleware(RefusedWithoutKey {
                        method: request.method().clone(),
                        url: request.url().to_string(),
                        why: no_key,
                    }));
                }
                Err(_) => {}
            }
        }
        carry_trace_context(&span, &mut request);
        let (method, url) = (request.method().clone(), request.url().to_string());
        let outcome = next.run(request, extensions).instrument(span.clone()).await;
        if let Ok(response) = &outcome {
            span.record("http.response.status_code", response.status().as_u16());
        }
        match not_yet(&method, &url, &outcome) {
            Some(deferral) if self.defer_not_yet => Err(reqwest_middleware::Error::middleware(
                crate::defer(deferral),
            )),
            _ => outcome,
        }
    }
}

/// Sets the call's span context on `request` as W3C Trace Context headers, unless it carries a
/// `traceparent` already (set by a tracing middleware of the caller's).
fn carry_trace_context(span: &tracing::Span, request: &mut Request) {
    if request.headers().contains_key(trace_context::TRACEPARENT) {
        return;
    }
    for (name, value) in trace_context::headers_of(span) {
        if let (Ok(name), Ok(value)) = (
            HeaderName::from_bytes(name.as_bytes()),
            HeaderValue::from_str(&value),
        ) {
            request.headers_mut().insert(name, value);
        }
    }
}

/// A mutating request refused for want of a key to carry.
#[derive(Debug)]
struct RefusedWithoutKey {
    method: Method,
    url: String,
    why: crate::Error,
}

impl std::fmt::Display for RefusedWithoutKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "refusing {} {} without an idempotency key: {} (or set the header yourself, or \
             CarryKey::allow_without_key(true) for calls that need none)",
            self.method, self.url, self.why
        )
    }
}

impl std::error::Error for RefusedWithoutKey {}
