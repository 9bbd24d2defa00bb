//! How long the guest list remembers.

use std::time::Duration;

use crate::Error;

/// How long claimed rows live before a purge may delete them.
///
/// Retention must outlive the longest redelivery horizon upstream: a row purged while the
/// upstream still retries re-opens the door to a duplicate. [`Retention::new`] therefore takes the
/// horizon too and refuses a retention shorter than it, so the mistake stops the program at
/// start-up rather than double-charging a customer a day later.
///
/// ```
/// use std::time::Duration;
/// use guestlist_core::Retention;
///
/// const HOUR: Duration = Duration::from_secs(3600);
/// // Stripe retries webhooks for 72 hours: keep a week.
/// let week = Retention::new(168 * HOUR, 72 * HOUR)?;
/// assert_eq!(week.duration(), 168 * HOUR);
///
/// let err = Retention::new(24 * HOUR, 72 * HOUR).unwrap_err();
/// assert!(err.to_string().contains("shorter than the redelivery horizon"));
/// # Ok::<(), guestlist_core::Error>(())
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Retention(Duration);

impl Retention {
    /// Stripe's webhook redelivery horizon, 72 hours: a common upstream's longest retry.
    pub const STRIPE_WEBHOOK_HORIZON: Duration = Duration::from_secs(72 * 3600);

    /// One week: outlives a 72-hour horizon with room for a weekend incident.
    pub const ONE_WEEK: Duration = Duration::from_secs(7 * 24 * 3600);

    /// A retention of `keep`, refused if shorter than `horizon`, the longest time after which any
    /// upstream may still redeliver a message.
    pub fn new(keep: Duration, horizon: Duration) -> Result<Self, Error> {
        if keep.is_zero() {
            return Err(Error::ZeroRetention);
        }
        if keep < horizon {
            return Err(Error::RetentionShorterThanHorizon {
                keep_secs: keep.as_secs(),
                horizon_secs: horizon.as_secs(),
            });
        }
        Ok(Self(keep))
    }

    /// How long rows live.
    pub fn duration(self) -> Duration {
        self.0
    }
}

impl Default for Retention {
    /// One week, which covers Stripe's 72-hour webhook horizon.
    fn default() -> Self {
        Self(Self::ONE_WEEK)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn refuses_zero_and_shorter_than_horizon() {
        assert_eq!(
            Retention::new(Duration::ZERO, Duration::ZERO),
            Err(Error::ZeroRetention)
        );
        let hour = Duration::from_secs(3600);
        assert!(matches!(
            Retention::new(hour, 2 * hour),
            Err(Error::RetentionShorterThanHorizon {
                keep_secs: 3600,
                horizon_secs: 7200
            })
        ));
        assert_eq!(
            Retention::new(hour, hour).map(Retention::duration),
            Ok(hour)
        );
    }
}
