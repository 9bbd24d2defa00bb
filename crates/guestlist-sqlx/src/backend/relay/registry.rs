//! The relays' registry: each running relay beats its heartbeat, so that the others know how
//! many share the shards; one long gone is forgotten.

use std::future::Future;

use super::RelaySql;
use crate::backend::sealed::OutboxStatements;
use crate::backend::statement::Plain;

/// The registry's statements. Sealed: implemented here for the three backends.
#[allow(unreachable_pub)]
pub trait RegistryStatements: OutboxStatements {
    /// Template of [`RelaySql::beat`].
    const RELAY_BEAT: &'static str;
    /// Template of [`RelaySql::sweep`].
    const RELAY_SWEEP: &'static str;
    /// Template of [`RelaySql::live`].
    const RELAY_LIVE: &'static str;
    /// Template of [`RelaySql::leave`].
    const RELAY_LEAVE: &'static str;

    /// Renews `holder`'s heartbeat for `lease_ms` (registering it), forgets relays long gone,
    /// and reads the relays whose heartbeat holds.
    fn relay_beat<'c>(
        conn: &'c mut Self::Connection,
        sql: &'c RelaySql,
        holder: &'c str,
        lease_ms: i64,
    ) -> impl Future<Output = Result<Vec<String>, sqlx::Error>> + Send + 'c {
        async move {
            Self::relay_heartbeat(&mut *conn, sql, holder, lease_ms).await?;
            Self::run(&mut *conn, sql, Plain::new(|sql: &RelaySql| &sql.sweep, ())).await?;
            Self::relay_live(conn, sql).await
        }
    }

    /// Renews `holder`'s heartbeat for `lease_ms` (registering it), and only that: the beat of a
    /// round that waits on the broker.
    fn relay_heartbeat<'c>(
        conn: &'c mut Self::Connection,
        sql: &'c RelaySql,
        holder: &'c str,
        lease_ms: i64,
    ) -> impl Future<Output = Result<(), sqlx::Error>> + Send + 'c {
        let beat = Self::run(
            conn,
            sql,
            Plain::new(|sql: &RelaySql| &sql.beat, (holder, lease_ms)),
        );
        async move { beat.await.map(drop) }
    }

    /// The relays whose heartbeat holds.
    fn relay_live<'c>(
        conn: &'c mut Self::Connection,
        sql: &'c RelaySql,
    ) -> impl Future<Output = Result<Vec<String>, sqlx::Error>> + Send + 'c {
        async move {
            let live = Plain::reading(|sql: &RelaySql| &sql.live, ());
            let live: Vec<(String,)> = Self::fetch(conn, sql, live).await?;
            Ok(live.into_iter().map(|(holder,)| holder).collect())
        }
    }

    /// `holder` leaves the registry.
    fn relay_leave<'c>(
        conn: &'c mut Self::Connection,
        sql: &'c RelaySql,
        holder: &'c str,
    ) -> impl Future<Output = Result<(), sqlx::Error>> + Send + 'c {
        let left = Self::run(
            conn,
            sql,
            Plain::new(|sql: &RelaySql| &sql.leave, (holder,)),
        );
        async move { left.await.map(drop) }
    }
}
