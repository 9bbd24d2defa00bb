//! What becomes of a row the broker confirmed (stamped: deleted, or kept marked) or refused
//! for good (moved to the dead letters), each fenced by the leases on the same transaction.

use std::future::Future;

use sqlx::{AssertSqlSafe, Connection};

use super::lease::{Held, renewed_on};
use super::{RelaySql, id_list};
use crate::backend::sealed::OutboxStatements;
use crate::backend::statement::{Args, Codec, Plain};

/// What the relay's stamp does with a row the broker confirmed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[allow(unreachable_pub)] // named by the sealed traits, unreachable outside the crate
pub enum Stamp {
    /// Deletes it: no second row version, no index entry written.
    Delete,
    /// Sets its `published_at`, with the relay that published it and the shard's token
    /// (`published_by`, `published_token`), and the purge deletes it by age.
    Keep,
}

/// The stamp's and the burial's statements. Sealed: implemented here for the three backends.
#[allow(unreachable_pub)]
pub trait StampStatements: OutboxStatements {
    /// Template of [`RelaySql::stamp`].
    const RELAY_STAMP: &'static str;
    /// Template of [`RelaySql::delete`].
    const RELAY_DELETE: &'static str;
    /// Template of [`RelaySql::bury`].
    const RELAY_BURY: &'static str;
    /// Template of [`RelaySql::unpend`].
    const RELAY_UNPEND: &'static str;

    /// Renews the leases of `held` and, if every token still holds its shard, stamps the rows
    /// `ids` as published (deleting them, or keeping them marked with the relay `holder` and
    /// its shard's token, as `stamp` says), atomically: `false` (and nothing stamped) when a
    /// lease was lost. Written for the databases whose statements cannot do both in one: a
    /// transaction of its own.
    fn relay_stamp<'c>(
        conn: &'c mut Self::Connection,
        sql: &'c RelaySql,
        held: &'c Held,
        lease_ms: i64,
        ids: &'c [i64],
        stamp: (Stamp, &'c str),
    ) -> impl Future<Output = Result<bool, sqlx::Error>> + Send + 'c {
        stamp_in_transaction::<Self>(conn, sql, held, lease_ms, ids, stamp)
    }

    /// Moves the pending row `id` to the outgoing dead letters with `reason`, if every token of
    /// `held` still holds its shard (renewing them): `false` (and nothing moved) when one was
    /// lost.
    fn relay_bury<'c>(
        conn: &'c mut Self::Connection,
        sql: &'c RelaySql,
        held: &'c Held,
        lease_ms: i64,
        id: i64,
        reason: &'c str,
    ) -> impl Future<Output = Result<bool, sqlx::Error>> + Send + 'c {
        bury_in_transaction::<Self>(conn, sql, held, lease_ms, id, reason)
    }
}

/// Stamps `ids` on a transaction after renewing the leases of `held`, for the backends whose
/// statements cannot do both in one: the stamp's text ends where the literal id list goes.
async fn stamp_in_transaction<DB: Codec>(
    conn: &mut DB::Connection,
    sql: &RelaySql,
    held: &Held,
    lease_ms: i64,
    ids: &[i64],
    (stamp, holder): (Stamp, &str),
) -> Result<bool, sqlx::Error> {
    let mut tx = conn.begin().await?;
    if !renewed_on::<DB>(&mut tx, sql, held, lease_ms).await? {
        return Ok(false);
    }
    if !ids.is_empty() {
        // Plain integers, formatted here: nothing to escape, and not kept as a prepared
        // statement since every batch's list differs. The holder, text, is bound.
        let text = format!("{}{}", sql.stamp(stamp), id_list(ids));
        let query = sqlx::query(AssertSqlSafe(text)).persistent(false);
        let query = match stamp {
            Stamp::Keep => query.arg(holder),
            Stamp::Delete => query,
        };
        DB::run_query(&mut tx, query).await?;
    }
    tx.commit().await?;
    Ok(true)
}

/// Moves the row `id` to the dead letters on a transaction after renewing the leases: they
/// fence the move as they fence a stamp.
async fn bury_in_transaction<DB: Codec>(
    conn: &mut DB::Connection,
    sql: &RelaySql,
    held: &Held,
    lease_ms: i64,
    id: i64,
    reason: &str,
) -> Result<bool, sqlx::Error> {
    let mut tx = conn.begin().await?;
    if !renewed_on::<DB>(&mut tx, sql, held, lease_ms).await? {
        return Ok(false);
    }
    let bury = Plain::new(|sql: &RelaySql| &sql.bury, (reason, id));
    DB::run(&mut tx, sql, bury).await?;
    let unpend = Plain::new(|sql: &RelaySql| &sql.unpend, (id,));
    DB::run(&mut tx, sql, unpend).await?;
    tx.commit().await?;
    Ok(true)
}
