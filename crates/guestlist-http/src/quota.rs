//! The caps on a scope's keys: a new key over one is answered 429 before anything runs.

use http::Response;

use crate::body::Body;
use crate::config::Config;
use crate::mode::Mode;
use crate::outcome::Outcome;
use crate::problem::Problem;
use guestlist_core::Scope;

/// The 429 for a new key whose scope is over a cap, if it is. A store that cannot count, or
/// fails to, caps nothing: the caps protect the store, they are no guarantee of its own.
pub(crate) async fn over_quota<M: Mode>(
    mode: &M,
    config: &Config,
    scope: &Scope,
) -> Option<Response<Body>> {
    let (in_flight_cap, keys_cap) = (config.max_in_flight_per_scope, config.max_keys_per_scope);
    if in_flight_cap.is_none() && keys_cap.is_none() {
        return None;
    }
    let usage = match mode.usage(scope).await {
        Ok(usage) => usage?,
        Err(err) => {
            tracing::warn!(error = %err, "cannot count the scope's keys; not capping this request");
            return None;
        }
    };
    let problem = if in_flight_cap.is_some_and(|cap| usage.in_flight > cap) {
        let seconds = config.lease.as_secs().max(1);
        Problem::too_many_in_flight(format!(
            "this client already has {} requests with keys in flight, and its limit is {}; \
                 nothing was run: retry with the same key after {seconds}s",
            usage.in_flight - 1,
            in_flight_cap.unwrap_or_default()
        ))
        .retry_after(seconds)
    } else if keys_cap.is_some_and(|cap| usage.keys > cap) {
        Problem::too_many_keys(format!(
            "this client already holds {} idempotency keys, and its limit is {}; nothing \
                 was run: retry later, once older keys have expired, and reuse a key only to \
                 retry its own request",
            usage.keys - 1,
            keys_cap.unwrap_or_default()
        ))
        .retry_after(60)
    } else {
        return None;
    };
    Outcome::OverQuota.record();
    Some(problem.into_response())
}
