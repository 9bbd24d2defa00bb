//! The outbox's figures, for operators (`guestlist stats`) and dashboards.

use std::time::Duration;

use crate::Error;
use crate::backend::Backend;
use crate::backend::relay::shard_count;
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
    /// The table's shards, each with its lease and its backlog.
    pub shards: Vec<ShardStats>,
    /// The relays whose heartbeat holds, each with the shards it holds and its lag.
    pub relays: Vec<RelayStats>,
}

/// One shard at one moment.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct ShardStats {
    /// Its number, from 0.
    pub shard: u32,
    /// Its lease.
    pub lease: RelayLease,
    /// Its messages not yet published.
    pub pending: u64,
    /// How long its oldest pending message has waited.
    pub oldest_pending: Option<Duration>,
}

/// A shard's lease at one moment.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct RelayLease {
    /// The relay holding it, or the last one that did; `None` when given up or never taken.
    pub holder: Option<String>,
    /// Raised at each take.
    pub token: i64,
    /// How long the lease has left; `None` once expired (no relay is publishing the shard).
    pub expires_in: Option<Duration>,
}

/// A running relay at one moment.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct RelayStats {
    /// Its name ([`Relay::holder`](crate::Relay::holder)).
    pub holder: String,
    /// The shards whose leases it holds.
    pub shards: Vec<u32>,
    /// Messages waiting on its shards.
    pub pending: u64,
    /// Its lag: how long the oldest message on its shards has waited.
    pub oldest_pending: Option<Duration>,
}

impl OutboxStats {
    /// The table's shard count.
    pub fn shard_count(&self) -> u32 {
        self.shards.len().max(1) as u32
    }

    /// The shards no relay's lease holds (none publishes them until one takes them).
    pub fn unheld(&self) -> Vec<u32> {
        self.shards
            .iter()
            .filter(|shard| shard.lease.expires_in.is_none())
            .map(|shard| shard.shard)
            .collect()
    }
}

impl<DB: Backend> Outbox<DB> {
    /// Reads the outbox's figures, its shards' leases and backlogs, and its running relays.
    pub async fn stats(&self, pool: &sqlx::Pool<DB>) -> Result<OutboxStats, Error> {
        let read = async {
            let mut conn = pool.acquire().await?;
            let figures = DB::outbox_stats(&mut conn, &self.relay).await?;
            let shards = DB::relay_shards(&mut conn, &self.relay).await?;
            let count = shard_count(&shards);
            let lag = DB::relay_lag(&mut conn, &self.relay, count).await?;
            let live = DB::relay_live(&mut conn, &self.relay).await?;
            Ok::<_, sqlx::Error>((figures, shards, lag, live))
        };
        let (figures, shard_rows, lag, live) = read
            .await
            .map_err(|err| Error::from_store::<DB>(self.table(), err))?;
        let millis = |ms: i64| Duration::from_millis(ms.max(0).unsigned_abs());
        let shards: Vec<ShardStats> = shard_rows
            .into_iter()
            .map(|row| {
                let backlog = lag.iter().find(|lag| lag.shard == row.shard);
                ShardStats {
                    shard: u32::try_from(row.shard).unwrap_or(0),
                    lease: RelayLease {
                        holder: row.holder,
                        token: row.token,
                        expires_in: row.left_ms.filter(|ms| *ms > 0).map(millis),
                    },
                    pending: backlog.map_or(0, |lag| lag.pending.max(0).unsigned_abs()),
                    oldest_pending: backlog.and_then(|lag| lag.oldest_ms.map(millis)),
                }
            })
            .collect();
        let relays = live
            .into_iter()
            .map(|holder| {
                let held: Vec<&ShardStats> = shards
                    .iter()
                    .filter(|s| {
                        s.lease.expires_in.is_some() && s.lease.holder.as_deref() == Some(&holder)
                    })
                    .collect();
                RelayStats {
                    shards: held.iter().map(|s| s.shard).collect(),
                    pending: held.iter().map(|s| s.pending).sum(),
                    oldest_pending: held.iter().filter_map(|s| s.oldest_pending).max(),
                    holder,
                }
            })
            .collect();
        Ok(OutboxStats {
            rows: figures.rows.max(0).unsigned_abs(),
            pending: figures.pending.max(0).unsigned_abs(),
            oldest_pending: figures.oldest_ms.map(millis),
            bytes: figures.bytes.map(|b| b.max(0).unsigned_abs()),
            shards,
            relays,
        })
    }
}
