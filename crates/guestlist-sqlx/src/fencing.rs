//! Fencing tokens and leases as the statements bind them: the HTTP keys' attempts and the
//! relay's lease are both fenced by a random token, their leases counted in milliseconds.

use std::time::Duration;

use crate::Error;

/// A lease in whole milliseconds, as the statements bind it.
pub(crate) fn lease_ms(lease: Duration) -> i64 {
    lease.as_millis().min(i64::MAX as u128) as i64
}

/// A fresh fencing token from the operating system's random source.
pub(crate) fn new_token() -> Result<u64, Error> {
    getrandom::u64().map_err(|err| {
        Error::Database(sqlx::Error::Protocol(format!(
            "no randomness for a fencing token: {err}"
        )))
    })
}
