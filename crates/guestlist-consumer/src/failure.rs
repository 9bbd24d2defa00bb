//! Why a handler run failed.

use std::future::Future;
use std::time::{Duration, Instant};

use guestlist_core::Deferral;
use guestlist_sqlx::WorkError;

/// Why a handler run failed: its own error (its type erased, its chain of sources kept), or it
/// ran out of time.
#[derive(Debug)]
pub enum Failure {
    Handler(guestlist_core::BoxError),
    TimedOut(Duration),
}

impl Failure {
    /// The deferral the handler returned as its error, or held in the error's chain.
    pub(crate) fn deferral(&self) -> Option<&Deferral> {
        let Failure::Handler(err) = self else {
            return None;
        };
        Deferral::find(err.as_ref())
    }
}

impl std::fmt::Display for Failure {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Failure::Handler(err) => write!(f, "{err}"),
            Failure::TimedOut(limit) => write!(f, "the handler ran longer than {limit:?}"),
        }
    }
}

impl std::error::Error for Failure {
    // The handler's own error is the source, so the inbox sees a deadlock inside it and runs the
    // transaction again.
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            Failure::Handler(err) => Some(&**err),
            Failure::TimedOut(_) => None,
        }
    }
}

/// Runs `work` within `limit`, timing it for the handler-latency histogram.
pub(crate) async fn timed<E: WorkError>(
    limit: Duration,
    work: impl Future<Output = Result<(), E>>,
) -> Result<(), Failure> {
    let started = Instant::now();
    let result = match tokio::time::timeout(limit, work).await {
        Ok(result) => result.map_err(|err| Failure::Handler(err.into_boxed())),
        Err(_) => Err(Failure::TimedOut(limit)),
    };
    metrics::histogram!("guestlist_consumer_handler_seconds")
        .record(started.elapsed().as_secs_f64());
    result
}
