//! Whether a hop is working or waiting out an outage: logged once per change, a gauge, and a
//! handle for a service's `/readyz`.

use std::fmt;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// Whether a relay or a consumer is working, or waiting out an [outage](crate::FailureKind::Outage)
/// of something it depends on (its database, its broker). Cheap to clone: take one from
/// [`Relay::health`](crate::Relay::health) or `Consumer::health` before the run starts, and
/// answer a service's `/readyz` from it.
///
/// Each change is logged once (a warning when an outage begins, naming its cause; an info line
/// when the hop resumes, with how long it waited) and set on the gauge
/// `guestlist_outage{hop, name}` (1 while down, 0 while working).
///
/// ```
/// let health = guestlist_sqlx::Health::new("consumer", "warehouse");
/// assert!(health.is_ready());
/// health.outage("the database: pool timed out");
/// assert_eq!(health.cause().as_deref(), Some("the database: pool timed out"));
/// assert!(!health.is_ready());
/// health.recovered();
/// assert!(health.is_ready());
/// ```
#[derive(Clone)]
pub struct Health {
    hop: &'static str,
    name: Arc<str>,
    state: Arc<Mutex<Option<Down>>>,
}

/// An outage under way.
#[derive(Debug, Clone)]
struct Down {
    cause: String,
    since: Instant,
}

impl fmt::Debug for Health {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Health")
            .field("hop", &self.hop)
            .field("name", &&*self.name)
            .field("cause", &self.cause())
            .finish()
    }
}

impl Health {
    /// The health of the hop `hop` (`relay`, `consumer`) named `name` (its table, its
    /// handler), working until told otherwise.
    pub fn new(hop: &'static str, name: impl Into<String>) -> Self {
        let health = Self {
            hop,
            name: name.into().into(),
            state: Arc::new(Mutex::new(None)),
        };
        health.gauge(0.0);
        health
    }

    /// `true` while the hop is working: no outage under way.
    pub fn is_ready(&self) -> bool {
        self.state().is_none()
    }

    /// What the outage under way is waiting for, if there is one.
    pub fn cause(&self) -> Option<String> {
        self.state().map(|down| down.cause)
    }

    /// How long the outage under way has lasted, if there is one.
    pub fn down_for(&self) -> Option<Duration> {
        self.state().map(|down| down.since.elapsed())
    }

    /// Records that an outage of `cause` is under way. Logged (and the gauge set) when it
    /// begins, and again only when its cause changes.
    pub fn outage(&self, cause: impl fmt::Display) {
        let cause = cause.to_string();
        let mut state = self.lock();
        match state.as_mut() {
            Some(down) if down.cause == cause => {}
            Some(down) => {
                tracing::warn!(hop = self.hop, name = %self.name, cause = %cause,
                    "still waiting, for another cause now; nothing is counted against messages");
                down.cause = cause;
            }
            None => {
                tracing::warn!(hop = self.hop, name = %self.name, cause = %cause,
                    "outage: waiting for it to end, backing off; nothing is counted against messages");
                *state = Some(Down {
                    cause,
                    since: Instant::now(),
                });
                self.gauge(1.0);
            }
        }
    }

    /// Records that the hop works again; logged once, with how long it waited.
    pub fn recovered(&self) {
        if let Some(down) = self.lock().take() {
            tracing::info!(hop = self.hop, name = %self.name, waited = ?down.since.elapsed(),
                cause = %down.cause, "outage over: working again");
            self.gauge(0.0);
        }
    }

    fn gauge(&self, value: f64) {
        metrics::gauge!("guestlist_outage", "hop" => self.hop, "name" => self.name.to_string())
            .set(value);
    }

    fn state(&self) -> Option<Down> {
        self.lock().clone()
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Option<Down>> {
        self.state
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }
}
