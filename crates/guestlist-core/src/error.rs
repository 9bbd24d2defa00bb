//! The values guestlist refuses: ids, names, table names, retentions.

/// A value that guestlist refuses, with what was wrong and what to do instead.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// The id or name is the empty string.
    #[error("{what} is empty; it must be 1 to 255 bytes of printable ASCII")]
    Empty {
        /// Which value: "message id" or "handler name".
        what: &'static str,
    },
    /// The id or name is longer than 255 bytes.
    #[error("{what} is {len} bytes; the limit is 255 — {}", shorter(what))]
    TooLong {
        /// Which value: "message id" or "handler name".
        what: &'static str,
        /// Its length in bytes.
        len: usize,
    },
    /// The id or name holds a byte outside printable ASCII (0x20..=0x7E).
    #[error(
        "{what} has byte 0x{byte:02x} at position {position}; only printable ASCII (0x20 to 0x7e) is allowed — {}",
        shorter(what)
    )]
    NotPrintableAscii {
        /// Which value: "message id" or "handler name".
        what: &'static str,
        /// Offset of the first offending byte.
        position: usize,
        /// The offending byte.
        byte: u8,
    },
    /// A table name that is not a plain SQL identifier.
    #[error(
        "table name {name:?} is not a plain identifier: use 1 to 48 ASCII letters, digits and underscores, \
         starting with a letter or underscore"
    )]
    InvalidTableName {
        /// The refused name.
        name: String,
    },
    /// A retention that would purge rows while an upstream may still redeliver them.
    #[error(
        "retention of {keep_secs}s is shorter than the redelivery horizon of {horizon_secs}s: rows would be purged \
         while the upstream may still redeliver their messages, and those would run twice — keep rows at least \
         as long as the longest upstream retries (Stripe retries webhooks for 72 hours; a week is a safe choice)"
    )]
    RetentionShorterThanHorizon {
        /// The requested retention, in seconds.
        keep_secs: u64,
        /// The declared redelivery horizon, in seconds.
        horizon_secs: u64,
    },
    /// A retention of zero would purge every row at once.
    #[error(
        "retention is zero: every row would be purged at once; keep rows at least as long as upstreams retry"
    )]
    ZeroRetention,
}

/// What to do with a value that breaks the printable-ASCII rule.
fn shorter(what: &str) -> &'static str {
    match what {
        "message id" => "derive one from the raw bytes with MessageId::from_raw_bytes",
        "idempotency key" => "send a UUID or another short printable key",
        "scope" => "derive one with Scope::from_credentials",
        _ => "choose a short printable ASCII name",
    }
}
