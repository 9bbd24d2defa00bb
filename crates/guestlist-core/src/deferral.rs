//! "Not yet": work that cannot be done now, and when to try again.

use std::error::Error as StdError;
use std::fmt;
use std::future::Future;
use std::sync::{Arc, Mutex};
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

tokio::task_local! {
    /// The deferral the work in progress recorded, for the runtime watching it.
    static DEFERRED: Arc<Mutex<Option<Deferral>>>;
}

/// Records that the work in progress cannot be done yet, and returns `deferral` for the work to
/// return as (or inside) its error.
///
/// Whatever the error type the work returns (a `String`, `anyhow`, an enum of its own), the
/// runtime that watches it ([`watch_deferral`]: guestlist's broker consumer) learns of the
/// deferral, and hands the message back for [`Deferral::after`] without counting it as a
/// failure. `guestlist_carry::CarryKey` records one by itself when a downstream answers "not
/// yet".
///
/// ```
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() {
/// use std::time::Duration;
/// use guestlist_core::Deferral;
///
/// let (result, deferred) = guestlist_core::watch_deferral(async {
///     let not_yet = Deferral::new(Duration::from_secs(2), "payments is restarting");
///     Err::<(), String>(guestlist_core::defer(not_yet).to_string())
/// })
/// .await;
/// assert!(result.is_err());
/// assert_eq!(deferred.unwrap().after(), Duration::from_secs(2));
/// # }
/// ```
pub fn defer(deferral: Deferral) -> Deferral {
    let _ = DEFERRED.try_with(|slot| {
        *slot.lock().unwrap_or_else(|poisoned| poisoned.into_inner()) = Some(deferral.clone());
    });
    deferral
}

/// Runs `work` and returns its output with the last deferral recorded inside it by [`defer`].
pub async fn watch_deferral<F: Future>(work: F) -> (F::Output, Option<Deferral>) {
    let slot = Arc::new(Mutex::new(None));
    let output = DEFERRED.scope(Arc::clone(&slot), work).await;
    let deferred = slot
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner())
        .take();
    (output, deferred)
}
