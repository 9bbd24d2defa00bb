//! "Not yet": work that cannot be done now, and when to try again.

use std::error::Error as StdError;
use std::fmt;
use std::time::Duration;

/// A handler's answer that its work cannot be done *yet*: a downstream service has the same work
/// in flight (409 with `Retry-After`), is rate-limited (429) or restarting (503, a refused
/// connection). It is not a failure: a consumer hands the message back for `after` and does not
/// count it toward poison; deferrals are bounded by time instead.
///
/// ```
/// use std::time::Duration;
/// use guestlist_core::Deferral;
///
/// let not_yet = Deferral::new(Duration::from_secs(30), "payments has this charge in flight");
/// assert_eq!(not_yet.after(), Duration::from_secs(30));
/// assert_eq!(
///     not_yet.to_string(),
///     "not yet, try again in 30s: payments has this charge in flight"
/// );
/// let boxed: Box<dyn std::error::Error> = Box::new(not_yet);
/// assert!(Deferral::find(boxed.as_ref()).is_some());
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Deferral {
    after: Duration,
    reason: String,
}

impl Deferral {
    /// Try again after `after`, because of `reason`.
    pub fn new(after: Duration, reason: impl Into<String>) -> Self {
        Self {
            after,
            reason: reason.into(),
        }
    }

    /// How long to wait before trying again.
    pub fn after(&self) -> Duration {
        self.after
    }

    /// Why the work cannot be done yet.
    pub fn reason(&self) -> &str {
        &self.reason
    }

    /// The deferral in `err` or in its chain of sources, if there is one.
    pub fn find<'a>(err: &'a (dyn StdError + 'static)) -> Option<&'a Deferral> {
        let mut next = Some(err);
        while let Some(err) = next {
            if let Some(deferral) = err.downcast_ref::<Deferral>() {
                return Some(deferral);
            }
            next = err.source();
        }
        None
    }
}

impl fmt::Display for Deferral {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "not yet, try again in {}s: {}",
            self.after.as_secs_f64(),
            self.reason
        )
    }
}

impl StdError for Deferral {}
