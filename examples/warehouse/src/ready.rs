//! What "ready" means for the example's services, and `GET /readyz`, which says it.
//!
//! A service is ready once its tables exist, its HTTP listener is bound and, for the warehouse,
//! its broker consumer is attached. Before that `/readyz` answers 503 with what the service still
//! waits for, and every other route 503 with `Retry-After: 1`; from then on `/readyz` answers
//! 200, unless a part it watches ([`Readiness::watch`]: the consumer's [`Health`]) waits out an
//! outage of its database, when it answers 503 with the cause. The line each binary prints (`payments on http://…`, `warehouse API on http://…`) comes
//! at the same moment, so that a script or a test that waits for it can use the service at once.

use std::sync::{Arc, Mutex, PoisonError};

use axum::Router;
use axum::extract::Request;
use axum::http::{StatusCode, header};
use axum::middleware::{Next, from_fn};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use guestlist::outbox::Health;

/// A service's readiness: what it still waits for, or nothing once ready.
#[derive(Debug, Clone)]
pub struct Readiness {
    waiting_for: Arc<Mutex<Option<&'static str>>>,
    watched: Arc<Mutex<Vec<Health>>>,
}

impl Readiness {
    /// Not ready yet: waiting for `what` (`"its tables"`).
    pub fn waiting_for(what: &'static str) -> Self {
        Self {
            waiting_for: Arc::new(Mutex::new(Some(what))),
            watched: Arc::default(),
        }
    }

    /// From now on `/readyz` also answers 503 while `health` reports an outage (a consumer's,
    /// from [`Consumer::health`](guestlist::consumer::Consumer::health)).
    pub fn watch(&self, health: Health) {
        self.watched
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .push(health);
    }

    /// The outage a watched part waits out, if any: its cause and how long it has lasted.
    pub fn outage(&self) -> Option<String> {
        let watched = self.watched.lock().unwrap_or_else(PoisonError::into_inner);
        watched.iter().find_map(|health| {
            let cause = health.cause()?;
            let down_for = health.down_for().unwrap_or_default();
            Some(format!("{cause} (for {}s)", down_for.as_secs()))
        })
    }

    /// Still not ready: now waiting for `what`.
    pub fn now_waiting_for(&self, what: &'static str) {
        self.set(Some(what));
    }

    /// Ready: `/readyz` answers 200 and the routes behind [`Readiness::gate`] are open.
    pub fn ready(&self) {
        self.set(None);
    }

    /// What the service still waits for; `None` once ready.
    pub fn pending(&self) -> Option<&'static str> {
        *self
            .waiting_for
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
    }

    /// `app`'s routes, answering 503 until ready, and `GET /readyz`.
    pub fn gate(&self, app: Router) -> Router {
        let (gate, probe) = (self.clone(), self.clone());
        app.layer(from_fn(move |request: Request, next: Next| {
            let gate = gate.clone();
            async move {
                match gate.pending() {
                    None => next.run(request).await,
                    Some(what) => not_ready(what),
                }
            }
        }))
        .route(
            "/readyz",
            get(move || {
                let answer = match (probe.pending(), probe.outage()) {
                    (Some(what), _) => not_ready(what),
                    (None, Some(outage)) => (
                        StatusCode::SERVICE_UNAVAILABLE,
                        [(header::RETRY_AFTER, "1")],
                        format!("waiting out an outage: {outage}\n"),
                    )
                        .into_response(),
                    (None, None) => (StatusCode::OK, "ready\n").into_response(),
                };
                std::future::ready(answer)
            }),
        )
    }

    fn set(&self, waiting_for: Option<&'static str>) {
        *self
            .waiting_for
            .lock()
            .unwrap_or_else(PoisonError::into_inner) = waiting_for;
    }
}

/// 503: starting, come back in a second.
fn not_ready(what: &str) -> Response {
    (
        StatusCode::SERVICE_UNAVAILABLE,
        [(header::RETRY_AFTER, "1")],
        format!("starting: waiting for {what}\n"),
    )
        .into_response()
}
