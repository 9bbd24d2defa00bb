//! The client's `Prefer: wait=N` (RFC 7240): how long it will wait for the answer of a request
//! whose key is in flight, and the `Preference-Applied` that says what the server honoured.
//!
//! Written here rather than taken from a crate: the `headers` crate leaves `Prefer` out, and
//! the one preference read is `wait`.

use std::time::Duration;

use http::{HeaderMap, HeaderValue};

/// The request header a client states its preferences in.
pub(crate) const PREFER: &str = "prefer";
/// The response header that says which of them the server applied.
pub(crate) const PREFERENCE_APPLIED: &str = "preference-applied";

/// The `wait` the client prefers, in whole seconds as RFC 7240 gives it; `None` when it states
/// none, or none that reads as a number of seconds (a malformed preference is ignored, as the
/// RFC asks). Where `wait` appears more than once, the first counts.
pub(crate) fn wait_preferred(headers: &HeaderMap) -> Option<Duration> {
    headers
        .get_all(PREFER)
        .iter()
        .filter_map(|value| value.to_str().ok())
        .flat_map(|value| value.split(','))
        .find_map(|preference| {
            // A preference's own parameters follow a `;`: `wait=5; foo=bar`.
            let head = preference.split(';').next()?;
            let (name, value) = head.split_once('=')?;
            if !name.trim().eq_ignore_ascii_case("wait") {
                return None;
            }
            let seconds = value.trim().trim_matches('"');
            Some(seconds.parse::<u64>().ok().map(Duration::from_secs))
        })
        .flatten()
}

/// `Preference-Applied: wait=N`, `N` the whole seconds the server waited at most.
pub(crate) fn wait_applied(wait: Duration) -> HeaderValue {
    HeaderValue::from_str(&format!("wait={}", wait.as_secs()))
        .expect("digits are a valid header value")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn prefer(values: &[&str]) -> HeaderMap {
        let mut headers = HeaderMap::new();
        for value in values {
            headers.append(PREFER, HeaderValue::from_str(value).unwrap());
        }
        headers
    }

    #[test]
    fn reads_wait_among_other_preferences() {
        let seconds = |values: &[&str]| wait_preferred(&prefer(values)).map(|d| d.as_secs());
        assert_eq!(seconds(&["wait=5"]), Some(5));
        assert_eq!(seconds(&["respond-async, WAIT = 0"]), Some(0));
        assert_eq!(seconds(&["return=minimal", "wait=\"12\"; x=y"]), Some(12));
        assert_eq!(seconds(&["wait=3, wait=9"]), Some(3), "the first counts");
        assert_eq!(seconds(&["respond-async"]), None);
        assert_eq!(seconds(&["wait=soon"]), None, "malformed: ignored");
        assert_eq!(seconds(&[]), None);
    }
}
