//! A request that finds its key in flight, waiting (up to a bound) for the first attempt's
//! answer instead of taking 409 at once.

use std::time::{Duration, Instant};

use guestlist_core::{Fingerprint, KeyClaim};
use http::request::Parts;
use tokio::sync::oneshot;

use crate::config::Config;
use crate::held::{Held, Keyed, NotRun};
use crate::mode::Mode;
use crate::prefer;

/// What a wait came to: the key taken over (the first attempt released it), or why the request
/// does not run (a replay, still in flight past the wait, another payload, the store's
/// failure); with the wait honoured, where the client stated one (`Prefer: wait`).
pub(crate) struct Waited<M: Mode> {
    pub(crate) claimed: Result<Held<M>, NotRun>,
    pub(crate) applied: Option<Duration>,
}

/// Waits for the attempt that holds `keyed` to end, up to the server's bound or the client's
/// `Prefer: wait` if shorter, claiming the key again each time it may have changed hands: woken
/// at once by an attempt of this process, by the store's notice of another process's (on
/// PostgreSQL), else every poll interval. Gives up, as in flight,
/// when a cap of waiters is reached or the client hung up.
pub(crate) async fn wait_for_answer<M: Mode>(
    mode: &M,
    config: &Config,
    parts: &mut Parts,
    keyed: &Keyed,
    fingerprint: &Fingerprint,
    mut retry_after: Duration,
    hung_up: &mut oneshot::Receiver<()>,
) -> Waited<M> {
    let preferred = prefer::wait_preferred(&parts.headers);
    let bound = config.in_flight_wait;
    let wait = preferred.map_or(bound, |preferred| preferred.min(bound));
    // A server that never waits applies no preference: its answers stay as they were.
    let applied = preferred.filter(|_| !bound.is_zero()).map(|_| wait);
    let in_flight = |retry_after| Waited {
        claimed: Err(Ok(KeyClaim::InFlight { retry_after })),
        applied,
    };
    if wait.is_zero() {
        return in_flight(retry_after);
    }
    let Some(waiter) = config.waiting.enter(&keyed.scope, &keyed.key) else {
        tracing::debug!("too many requests wait on keys in flight; answering 409 at once");
        metrics::counter!("guestlist_http_waits_refused_total").increment(1);
        return in_flight(retry_after);
    };
    let began = Instant::now();
    let deadline = began + wait;
    let waited = loop {
        // Listening before the claim: an attempt ending between the two still wakes it.
        let woken = waiter.woken();
        tokio::pin!(woken);
        woken.as_mut().enable();
        let slot = mode.open(&mut parts.extensions);
        let lease = config.lease;
        match Held::claim(mode, slot, keyed.clone(), fingerprint, lease).await {
            Err(Ok(KeyClaim::InFlight { retry_after: left })) => retry_after = left,
            claimed => break Waited { claimed, applied },
        }
        let now = Instant::now();
        if now >= deadline {
            break in_flight(retry_after);
        }
        let pause = config.in_flight_poll.min(deadline - now);
        // Another process's attempt ending, where the store notifies.
        let elsewhere = mode.in_flight_ended(&keyed.scope, &keyed.key);
        tokio::select! {
            () = &mut woken => {}
            () = elsewhere => {}
            () = tokio::time::sleep(pause) => {}
            // Nobody to answer: leave the room, claim nothing more.
            _ = &mut *hung_up => break in_flight(retry_after),
        }
    };
    metrics::histogram!("guestlist_http_wait_seconds").record(began.elapsed().as_secs_f64());
    waited
}
