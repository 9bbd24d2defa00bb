//! The figures operators and the relays read: the backlog, the table's figures, every shard's
//! lease and backlog.

use std::future::Future;

use super::RelaySql;
use crate::backend::sealed::OutboxStatements;
use crate::backend::statement::{Plain, row};

row! {
    /// The outbox's figures as read.
    #[allow(unreachable_pub)] // named by the sealed traits, unreachable outside the crate
    pub struct OutboxStatsRow {
        rows: i64,
        pending: i64,
        /// The oldest pending row's age in milliseconds.
        oldest_ms: Option<i64>,
        /// The table's size in bytes, where the database tells.
        bytes: Option<i64>,
    }
}

row! {
    /// Pending rows and the oldest one's age as read.
    #[allow(unreachable_pub)] // named by the sealed traits, unreachable outside the crate
    pub struct BacklogRow {
        pending: i64,
        /// The oldest pending row's age in milliseconds.
        oldest_ms: Option<i64>,
    }
}

row! {
    /// A shard's lease as read.
    #[allow(unreachable_pub)] // named by the sealed traits, unreachable outside the crate
    pub struct ShardRow {
        shard: i64,
        token: i64,
        holder: Option<String>,
        /// Milliseconds the lease has left: negative once expired, `None` once released.
        left_ms: Option<i64>,
        /// The table's shard count the row belongs to.
        count: i64,
    }
}

impl ShardRow {
    /// Whether a relay holds the shard's lease now.
    pub(crate) fn held(&self) -> bool {
        self.left_ms.is_some_and(|ms| ms >= 0)
    }

    /// The relay holding the shard's lease now, with its token.
    pub(crate) fn holder_now(&self) -> Option<crate::history::Holder> {
        let relay = self.holder.clone().filter(|_| self.held())?;
        Some(crate::history::Holder {
            relay,
            token: self.token,
        })
    }
}

/// The shard count the table's lease rows carry (1 when there are none).
pub(crate) fn shard_count(rows: &[ShardRow]) -> u32 {
    let slots = i64::from(guestlist_core::protocol::SLOTS);
    rows.first().map_or(1, |row| row.count).clamp(1, slots) as u32
}

row! {
    /// A shard's backlog as read.
    #[allow(unreachable_pub)] // named by the sealed traits, unreachable outside the crate
    pub struct LagRow {
        shard: i64,
        pending: i64,
        /// The oldest pending row's age in milliseconds.
        oldest_ms: Option<i64>,
    }
}

/// The figures' statements. Sealed: implemented here for the three backends.
#[allow(unreachable_pub)]
pub trait FigureStatements: OutboxStatements {
    /// Template of [`RelaySql::backlog`].
    const OUTBOX_BACKLOG: &'static str;
    /// Template of [`RelaySql::stats`].
    const OUTBOX_STATS: &'static str;
    /// Template of [`RelaySql::shards`].
    const RELAY_SHARDS: &'static str;
    /// Template of [`RelaySql::lag`].
    const RELAY_LAG: &'static str;

    /// Pending rows and the oldest one's age (ms).
    fn outbox_backlog<'c>(
        conn: &'c mut Self::Connection,
        sql: &'c RelaySql,
    ) -> impl Future<Output = Result<BacklogRow, sqlx::Error>> + Send + 'c {
        Self::fetch_one(conn, sql, Plain::reading(|sql: &RelaySql| &sql.backlog, ()))
    }

    /// The outbox's figures for operators.
    fn outbox_stats<'c>(
        conn: &'c mut Self::Connection,
        sql: &'c RelaySql,
    ) -> impl Future<Output = Result<OutboxStatsRow, sqlx::Error>> + Send + 'c {
        Self::fetch_one(conn, sql, Plain::reading(|sql: &RelaySql| &sql.stats, ()))
    }

    /// Every shard's lease as it stands, by shard.
    fn relay_shards<'c>(
        conn: &'c mut Self::Connection,
        sql: &'c RelaySql,
    ) -> impl Future<Output = Result<Vec<ShardRow>, sqlx::Error>> + Send + 'c {
        Self::fetch(conn, sql, Plain::reading(|sql: &RelaySql| &sql.shards, ()))
    }

    /// Pending rows per shard when the table has `count` shards.
    fn relay_lag<'c>(
        conn: &'c mut Self::Connection,
        sql: &'c RelaySql,
        count: u32,
    ) -> impl Future<Output = Result<Vec<LagRow>, sqlx::Error>> + Send + 'c {
        let lag = Plain::reading(|sql: &RelaySql| &sql.lag, (i64::from(count),));
        Self::fetch(conn, sql, lag)
    }
}
