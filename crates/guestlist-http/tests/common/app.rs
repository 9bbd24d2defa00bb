//! The API under test: `POST /payments` creates a payment and counts every execution.
//!
//! Request headers steer the handler: `x-test-status` (the answer's status, default 201),
//! `x-test-response-bytes` (pad the body to that size), `x-test-hang` (print a marker and hang,
//! for the SIGKILL test), `x-test-block` (wait for the test to release it) and
//! `x-test-keep-locked` (mark the answer [`guestlist_http::KeepLocked`]: the work may have
//! happened).

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use axum::body::Bytes;
use axum::http::{HeaderMap, StatusCode, header};
use axum::response::{IntoResponse, Response};
use tokio::sync::Notify;

/// What every handler shares: the execution counter, and the named gates that hold a handler
/// until the test lets it go (`x-test-block: <name>`).
#[derive(Clone, Default)]
pub struct AppState {
    pub executions: Arc<AtomicU64>,
    gates: Arc<Mutex<HashMap<String, Gate>>>,
}

/// A handler held at a gate: `entered` fires when it arrives, `open` lets it go.
#[derive(Clone, Default)]
pub struct Gate {
    pub entered: Arc<Notify>,
    pub open: Arc<Notify>,
}

/// What the handler printed once it wrote its row and started to hang.
pub const HANGING: &str = "HANDLER WROTE ITS ROW AND HANGS";

impl AppState {
    /// Counts one execution and returns its payment id.
    pub fn execute(&self) -> String {
        format!("pay_{}", self.executions.fetch_add(1, Ordering::SeqCst) + 1)
    }

    pub fn executions(&self) -> u64 {
        self.executions.load(Ordering::SeqCst)
    }

    /// The gate called `name`.
    pub fn gate(&self, name: &str) -> Gate {
        self.gates
            .lock()
            .unwrap()
            .entry(name.to_owned())
            .or_default()
            .clone()
    }

    /// Hangs, blocks or dawdles where the request asks to, after the handler's writes.
    pub async fn pause_if_asked(&self, headers: &HeaderMap) {
        if let Some(ms) = headers
            .get("x-test-delay-ms")
            .and_then(|v| v.to_str().ok()?.parse::<u64>().ok())
        {
            tokio::time::sleep(std::time::Duration::from_millis(ms)).await;
        }
        if headers.contains_key("x-test-hang") {
            println!("{HANGING}");
            std::future::pending::<()>().await;
        }
        if let Some(name) = headers.get("x-test-block").and_then(|v| v.to_str().ok()) {
            let gate = self.gate(name);
            gate.entered.notify_one();
            gate.open.notified().await;
        }
    }
}

/// The handler's answer: the payment id and what it was asked, with a `Location`.
pub fn answer(payment: &str, headers: &HeaderMap, body: &Bytes) -> Response {
    let status = headers
        .get("x-test-status")
        .and_then(|v| v.to_str().ok()?.parse().ok())
        .and_then(|code| StatusCode::from_u16(code).ok())
        .unwrap_or(StatusCode::CREATED);
    // The key a call to the card network would carry, derived from the client's key.
    let carried =
        guestlist_carry::key_for("charge").map_or_else(|_| "none".to_owned(), |k| k.to_string());
    let mut text = format!(
        "{{\"payment\":\"{payment}\",\"request_bytes\":{},\"carried\":\"{carried}\"}}",
        body.len()
    );
    if let Some(size) = headers
        .get("x-test-response-bytes")
        .and_then(|v| v.to_str().ok()?.parse::<usize>().ok())
    {
        text = format!("{text}{}", " ".repeat(size.saturating_sub(text.len())));
    }
    let keep_locked = headers.contains_key("x-test-keep-locked");
    let mut response = (
        status,
        [
            (header::CONTENT_TYPE, "application/json".to_owned()),
            (header::LOCATION, format!("/payments/{payment}")),
            (
                header::HeaderName::from_static("x-not-stored"),
                "1".to_owned(),
            ),
        ],
        text,
    )
        .into_response();
    if keep_locked {
        response.extensions_mut().insert(guestlist_http::KeepLocked);
    }
    response
}
