//! The outbox's figures, for operators (`guestlist stats`) and dashboards.

use std::time::Duration;

use crate::Error;
use crate::backend::Backend;
use crate::outbox::Outbox;

/// The outbox's figures at one moment.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct OutboxStats {
    /// Messages in the table, published or not.
    pub rows: u64,
    /// Messages not yet published.
    pub pending: u64,
    /// How long the oldest pending message has waited: a relay that is down or behind shows
    /// here first.
    pub oldest_pending: Option<Duration>,
    /// The table's size with its indexes, where the database reports it.
    pub bytes: Option<u64>,
    /// Which relay holds the lease.
    pub lease: RelayLease,
}

/// The relays' lease at one moment.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct RelayLease {
    /// The relay holding it, or the last one that did; `None` when given up or never taken.
    pub holder: Option<String>,
    /// Raised at each take-over.
    pub token: i64,
    /// How long the lease has left; `None` once expired (no relay is publishing).
    pub expires_in: Option<Duration>,
}

impl<DB: Backend> Outbox<DB> {
    /// Reads the outbox's figures and its relays' lease.
    pub async fn stats(&self, pool: &sqlx::Pool<DB>) -> Result<OutboxStats, Error> {
        let read = async {
            let mut conn = pool.acquire().await?;
            let figures = DB::outbox_stats(&mut conn, &self.relay).await?;
            let lease = DB::relay_lease(&mut conn, &self.relay).await?;
            Ok::<_, sqlx::Error>((figures, lease))
        };
        let ((rows, pending, oldest_ms, bytes), (token, holder, left_ms)) = read
            .await
            .map_err(|err| Error::from_store::<DB>(self.table(), err))?;
        let millis = |ms: i64| Duration::from_millis(ms.max(0).unsigned_abs());
        Ok(OutboxStats {
            rows: rows.max(0).unsigned_abs(),
            pending: pending.max(0).unsigned_abs(),
            oldest_pending: oldest_ms.map(millis),
            bytes: bytes.map(|b| b.max(0).unsigned_abs()),
            lease: RelayLease {
                holder,
                token,
                expires_in: left_ms.filter(|ms| *ms > 0).map(millis),
            },
        })
    }
}
