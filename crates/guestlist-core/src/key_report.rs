//! What an operator reads about idempotency keys: one key's state, and the table's figures.

use std::fmt;
use std::time::Duration;

/// One key as a store reads it for an operator (`SqlKeyStore::inspect`, `RedisKeyStore::inspect`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KeyRecord {
    /// Which attempt holds (or held) the key: above 1 after a take-over of an expired lease.
    pub attempt: u64,
    /// The hex SHA-256 fingerprint of the request that claimed the key.
    pub fingerprint: String,
    /// Where the key stands.
    pub state: KeyState,
}

/// Where a key stands. With the `serde` feature it serializes as `{"state": "in_flight",
/// "lease_left_ms": 1500}`, `{"state": "abandoned"}` or `{"state": "stored", "status": 201,
/// "body_bytes": 17}`.
#[derive(Debug, Clone, PartialEq, Eq)]
#[cfg_attr(feature = "serde", derive(serde::Serialize))]
#[cfg_attr(feature = "serde", serde(tag = "state", rename_all = "snake_case"))]
pub enum KeyState {
    /// An attempt is running with this much lease left: retries get 409.
    InFlight {
        /// Time until a retry may take over.
        #[cfg_attr(
            feature = "serde",
            serde(
                rename = "lease_left_ms",
                serialize_with = "crate::serde_millis::serialize"
            )
        )]
        lease_left: Duration,
    },
    /// The attempt's lease ended without a response: the next retry takes over.
    Abandoned,
    /// A response is stored and replayed to retries.
    Stored {
        /// Its status.
        status: u16,
        /// Its body's size; `None` when it was too large to store.
        body_bytes: Option<usize>,
    },
}

impl fmt::Display for KeyState {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            KeyState::InFlight { lease_left } => write!(
                f,
                "in flight, lease ends in {:.1}s (retries get 409)",
                lease_left.as_secs_f64()
            ),
            KeyState::Abandoned => {
                f.write_str("abandoned: its lease ended without a response; the next retry runs")
            }
            KeyState::Stored {
                status,
                body_bytes: Some(bytes),
            } => write!(
                f,
                "stored: status {status}, {bytes}-byte body (retries get it)"
            ),
            KeyState::Stored {
                status,
                body_bytes: None,
            } => write!(f, "stored: status {status}, body too large to keep"),
        }
    }
}

/// A key no response is stored for yet, as `SqlKeyStore::in_flight` lists them for an
/// operator: whose it is, which attempt holds it, and its lease.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HeldKey {
    /// Its scope, as stored (`cred:` and a hash for keys scoped by credentials).
    pub scope: String,
    /// The key, as stored (its hash where the store hashes keys).
    pub key: String,
    /// Which attempt holds it: above 1 after a take-over of an expired lease.
    pub attempt: u64,
    /// In flight with its lease left, or abandoned (its lease ended without a response).
    pub state: KeyState,
    /// How long ago its first attempt claimed it.
    pub age: Duration,
}

/// A key store's figures, as `SqlKeyStore::stats` and `RedisKeyStore::stats` read them.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KeyStats {
    /// Keys stored (rows in a SQL table).
    pub rows: u64,
    /// Keys whose attempt has not answered (running, or abandoned and not yet retried).
    pub in_flight: u64,
    /// The oldest key's age; `None` when there is none.
    pub oldest: Option<Duration>,
    /// The size the keys take: on disk, indexes included, for a SQL table (SQLite: the whole
    /// database file's); in memory for Redis.
    pub bytes: Option<u64>,
}
