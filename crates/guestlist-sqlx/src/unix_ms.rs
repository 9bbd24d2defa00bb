//! Times kept as Unix milliseconds in a 64-bit column (a deferral's first, a dead letter's),
//! written by the process's clock and read back as `SystemTime`.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

/// Now, in Unix milliseconds.
pub(crate) fn now() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| i64::try_from(d.as_millis()).unwrap_or(i64::MAX))
}

/// The time `ms` Unix milliseconds name (the epoch for a negative value).
pub(crate) fn time(ms: i64) -> SystemTime {
    UNIX_EPOCH + Duration::from_millis(u64::try_from(ms).unwrap_or(0))
}
