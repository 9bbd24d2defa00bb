//! The reverse proxy behind the layer: one request to the upstream, and what its failure means
//! for the key.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};

use axum::body::Body;
use axum::extract::{ConnectInfo, Request, State};
use axum::http::{HeaderMap, HeaderName, HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use guestlist::http::{IdempotencyContext, KeepLocked};
use guestlist::{IdempotencyKey, trace_context};
use tracing::Instrument;

/// The upstream and the client that reaches it.
#[derive(Debug)]
pub(crate) struct Proxy {
    client: reqwest::Client,
    /// The upstream's URL without a trailing slash; the request's path and query follow it.
    base: String,
    /// Whether keys are scoped per client: then the key sent upstream names the scope too, so
    /// that two clients' equal keys never meet there.
    scoped: bool,
    /// How long a keyed request may take upstream: it must be over before its lease ends.
    /// Unkeyed requests (downloads, streams) hold no key and get no such limit.
    timeout: Duration,
}

impl Proxy {
    /// A proxy to `upstream` that gives up on an answer after `timeout`; `scoped` when keys are
    /// scoped per client.
    pub(crate) fn new(
        upstream: &url::Url,
        timeout: Duration,
        scoped: bool,
    ) -> anyhow::Result<Self> {
        let client = reqwest::Client::builder()
            .connect_timeout(timeout.min(Duration::from_secs(5)))
            .redirect(reqwest::redirect::Policy::none())
            .no_proxy()
            .build()?;
        Ok(Self {
            client,
            base: upstream.as_str().trim_end_matches('/').to_owned(),
            scoped,
            timeout,
        })
    }
}

/// The key the upstream receives: the client's own where one scope holds every key (webhook
/// ids are global), else the key qualified by its scope ([`Scope::qualify`]), so that two
/// clients' `k-1` stay two keys upstream too, and no scope's end passes for a key's start.
///
/// [`Scope::qualify`]: guestlist::keys::Scope::qualify
fn upstream_key(context: &IdempotencyContext, scoped: bool) -> IdempotencyKey {
    if !scoped {
        return context.key.clone();
    }
    let qualified = context.scope.qualify(&context.key);
    // Past 255 bytes: a hash of it, as stable and as distinct.
    IdempotencyKey::new(qualified.as_str())
        .unwrap_or_else(|_| IdempotencyKey::derive(&qualified, "upstream"))
}

/// Headers that describe one connection, not the message: never forwarded (RFC 9110 §7.6.1).
fn hop_by_hop(name: &HeaderName) -> bool {
    matches!(
        name.as_str(),
        "connection"
            | "keep-alive"
            | "proxy-authenticate"
            | "proxy-authorization"
            | "proxy-connection"
            | "te"
            | "trailer"
            | "transfer-encoding"
            | "upgrade"
    )
}

/// The headers to pass on: without hop-by-hop ones, those the `Connection` header names, and
/// `Host`.
fn end_to_end(headers: &HeaderMap) -> HeaderMap {
    let named: Vec<String> = headers
        .get_all(header::CONNECTION)
        .iter()
        .filter_map(|value| value.to_str().ok())
        .flat_map(|value| value.split(','))
        .map(|token| token.trim().to_ascii_lowercase())
        .collect();
    headers
        .iter()
        .filter(|(name, _)| {
            !hop_by_hop(name) && *name != header::HOST && !named.iter().any(|n| n == name.as_str())
        })
        .map(|(name, value)| (name.clone(), value.clone()))
        .collect()
}

/// Forwards the request to the upstream. The key the request runs under travels in
/// `Idempotency-Key`, so the upstream can keep the inbox for its own next hop.
pub(crate) async fn forward(
    State(proxy): State<Arc<Proxy>>,
    ConnectInfo(peer): ConnectInfo<SocketAddr>,
    request: Request,
) -> Response {
    let started = Instant::now();
    if let Some(answer) = answered_here(&request) {
        return answer;
    }
    let (parts, body) = request.into_parts();
    let path = parts.uri.path_and_query().map_or("/", |pq| pq.as_str());
    let mut headers = end_to_end(&parts.headers);
    let context = parts.extensions.get::<IdempotencyContext>();
    if let Some(context) = context
        && let Ok(key) = HeaderValue::from_str(&upstream_key(context, proxy.scoped).header_value())
    {
        headers.insert("idempotency-key", key);
    }
    let mut forwarded_for: Vec<String> = parts
        .headers
        .get_all("x-forwarded-for")
        .iter()
        .filter_map(|v| v.to_str().ok().map(str::to_owned))
        .collect();
    forwarded_for.push(peer.ip().to_string());
    let forwarded_for = forwarded_for.join(", ");
    if let Ok(value) = HeaderValue::from_str(&forwarded_for) {
        headers.insert("x-forwarded-for", value);
    }
    if let Some(host) = parts.headers.get(header::HOST) {
        headers.insert("x-forwarded-host", host.clone());
    }
    let span = forward_span(&parts, path);
    carry_trace_context(&span, &mut headers);
    let mut request = proxy
        .client
        .request(parts.method.clone(), format!("{}{path}", proxy.base))
        .headers(headers)
        .body(reqwest::Body::wrap_stream(body.into_data_stream()));
    if context.is_some() {
        request = request.timeout(proxy.timeout);
    }
    let sent = request.send().instrument(span.clone()).await;
    if let Ok(upstream) = &sent {
        span.record("http.response.status_code", upstream.status().as_u16());
    }
    let response = match sent {
        Ok(upstream) => {
            let (status, headers) = (upstream.status(), end_to_end(upstream.headers()));
            let mut response = Response::new(Body::from_stream(upstream.bytes_stream()));
            *response.status_mut() = status;
            *response.headers_mut() = headers;
            if may_have_run(status) {
                // A 500, or a 502/504 from a proxy in between, may come after the work began:
                // keep the key until its lease ends rather than let a retry run it again now.
                response.extensions_mut().insert(KeepLocked);
            }
            response
        }
        Err(err) => failed(&err),
    };
    tracing::info!(
        method = %parts.method,
        path,
        status = response.status().as_u16(),
        upstream_ms = started.elapsed().as_millis() as u64,
        "proxied"
    );
    response
}

/// The span of the call upstream: the child of the keyed request's span, or, for a request
/// without a key, of the trace context the client sent.
fn forward_span(parts: &axum::http::request::Parts, path: &str) -> tracing::Span {
    let span = tracing::info_span!(
        "guestlist.gateway.forward",
        otel.name = %parts.method,
        otel.kind = "client",
        http.request.method = %parts.method,
        url.path = path,
        http.response.status_code = tracing::field::Empty,
    );
    if tracing::Span::current().is_none() {
        trace_context::adopt(&span, |name| {
            Some(parts.headers.get(name)?.to_str().ok()?.to_owned())
        });
    }
    span
}

/// Puts the call's span context in the headers sent upstream, in place of the client's (which
/// travel on untouched when the program installed no propagation).
fn carry_trace_context(span: &tracing::Span, headers: &mut HeaderMap) {
    let traced = trace_context::headers_of(span);
    if traced.is_empty() {
        return;
    }
    headers.remove(trace_context::TRACESTATE);
    for (name, value) in traced {
        if let (Ok(name), Ok(value)) = (
            HeaderName::from_bytes(name.as_bytes()),
            HeaderValue::from_str(&value),
        ) {
            headers.insert(name, value);
        }
    }
}

/// The answer to a request that is not for the upstream: `CONNECT` (the gateway tunnels
/// nothing: 405, nothing sent) and `OPTIONS *` (a question about the gateway itself, which has
/// no path to forward: 204 with the methods it forwards).
fn answered_here(request: &Request) -> Option<Response> {
    if request.method() == axum::http::Method::CONNECT {
        let mut response = problem(
            StatusCode::METHOD_NOT_ALLOWED,
            "method-not-allowed",
            "The gateway does not tunnel",
            "CONNECT is not forwarded; nothing was sent to the service behind the gateway",
        );
        response
            .headers_mut()
            .insert(header::ALLOW, HeaderValue::from_static(FORWARDED_METHODS));
        return Some(response);
    }
    if request.method() == axum::http::Method::OPTIONS && request.uri().path() == "*" {
        let mut response = StatusCode::NO_CONTENT.into_response();
        response
            .headers_mut()
            .insert(header::ALLOW, HeaderValue::from_static(FORWARDED_METHODS));
        return Some(response);
    }
    None
}

/// The methods the gateway forwards.
const FORWARDED_METHODS: &str = "GET, HEAD, POST, PUT, PATCH, DELETE, OPTIONS";

/// Whether an upstream status says the work may have run without saying how it ended. 503
/// (unavailable) and 429 (too many requests) say it did not run: the gateway releases those
/// keys, as it does on a 4xx it stores.
pub(crate) fn may_have_run(status: StatusCode) -> bool {
    status.is_server_error() && status != StatusCode::SERVICE_UNAVAILABLE
}

/// The answer for a request the upstream did not answer, and what it means for the key.
fn failed(err: &reqwest::Error) -> Response {
    if err.is_connect() {
        // Nothing reached the upstream: the 502 releases the key and a retry runs.
        tracing::warn!(error = %err, "the upstream is unreachable");
        return problem(
            StatusCode::BAD_GATEWAY,
            "upstream-unreachable",
            "The service behind the gateway is unreachable",
            "nothing was sent to it; retry with the same key",
        );
    }
    // The request may have reached the upstream and may still be running there: keep the key
    // locked until its lease ends, so that no retry sends a second copy meanwhile.
    let (status, kind, title) = if err.is_timeout() {
        tracing::warn!(error = %err, "the upstream did not answer in time; the key stays locked until its lease ends");
        (
            StatusCode::GATEWAY_TIMEOUT,
            "upstream-timeout",
            "The service behind the gateway did not answer in time",
        )
    } else {
        tracing::warn!(error = %err, "the upstream connection failed mid-request; the key stays locked until its lease ends");
        (
            StatusCode::BAD_GATEWAY,
            "upstream-failed",
            "The connection to the service behind the gateway failed",
        )
    };
    let mut response = problem(
        status,
        kind,
        title,
        "the request may have run; retry with the same key: until its lease ends you get 409, \
         then the retry runs once",
    );
    response.extensions_mut().insert(KeepLocked);
    response
}

/// An `application/problem+json` answer from the gateway itself.
pub(crate) fn problem(status: StatusCode, kind: &str, title: &str, detail: &str) -> Response {
    let body = serde_json::json!({
        "type": format!("https://github.com/guestlist-rs/guestlist/blob/main/docs/problems.md#{kind}"),
        "title": title,
        "status": status.as_u16(),
        "detail": detail,
    });
    (
        status,
        [(header::CONTENT_TYPE, "application/problem+json")],
        body.to_string(),
    )
        .into_response()
}
