//! A shard's lease: taken once it expired, renewed while held, given up at once; every move a
//! relay makes on the table is fenced by renewing it on the same transaction.

use std::future::Future;
use std::sync::Arc;

use sqlx::AssertSqlSafe;

use super::RelaySql;
use crate::backend::sealed::OutboxStatements;
use crate::backend::statement::{Args, Codec, Plain};

/// The shards a relay holds, each with its token.
#[allow(unreachable_pub)] // named by the sealed traits, unreachable outside the crate
pub type Held = [(u32, i64)];

/// The lease's statements. Sealed: implemented here for the three backends.
#[allow(unreachable_pub)]
pub trait LeaseStatements: OutboxStatements {
    /// Template of [`RelaySql::take`].
    const RELAY_TAKE: &'static str;
    /// Template of [`RelaySql::read_token`].
    const RELAY_READ_TOKEN: &'static str = "";
    /// Template of [`RelaySql::renew`].
    const RELAY_RENEW: &'static str;
    /// Template of [`RelaySql::release`].
    const RELAY_RELEASE: &'static str;

    /// Takes `shard`'s lease for `holder` if it has expired and the table still has `count`
    /// shards: the new token, or `None` while another relay holds it (or the count changed).
    /// Written for an update that returns the token.
    fn relay_take<'c>(
        conn: &'c mut Self::Connection,
        sql: &'c RelaySql,
        shard: u32,
        count: u32,
        holder: &'c str,
        lease_ms: i64,
    ) -> impl Future<Output = Result<Option<i64>, sqlx::Error>> + Send + 'c {
        let args = (holder, lease_ms, i64::from(shard), i64::from(count));
        let taken = Self::fetch_first(conn, sql, Plain::reading(take, args));
        async move { Ok(taken.await?.map(|(token,)| token)) }
    }

    /// Extends the leases of the shards `held` if each token still holds its own: `false` when
    /// any was lost (those still held are extended all the same). Written for the databases
    /// that cannot bind a list: the pairs go into the text.
    fn relay_renew<'c>(
        conn: &'c mut Self::Connection,
        sql: &'c RelaySql,
        held: &'c Held,
        lease_ms: i64,
    ) -> impl Future<Output = Result<bool, sqlx::Error>> + Send + 'c {
        renewed_on::<Self>(conn, sql, held, lease_ms)
    }

    /// Gives `shard`'s lease up so that another relay takes it at once.
    fn relay_release<'c>(
        conn: &'c mut Self::Connection,
        sql: &'c RelaySql,
        shard: u32,
        token: i64,
    ) -> impl Future<Output = Result<(), sqlx::Error>> + Send + 'c {
        let released = Self::run(
            conn,
            sql,
            Plain::new(|sql: &RelaySql| &sql.release, (i64::from(shard), token)),
        );
        async move { released.await.map(drop) }
    }
}

/// The lease's take: holder, lease (ms), shard, count.
pub(crate) fn take(sql: &RelaySql) -> &Arc<str> {
    &sql.take
}

/// The pairs of `held` as a literal SQL condition on a shard's row: plain integers, formatted
/// here, so nothing to escape.
fn held_pairs(held: &Held) -> String {
    if held.is_empty() {
        return "1 = 0".to_owned();
    }
    let pairs: Vec<String> = held
        .iter()
        .map(|(shard, token)| format!("(shard = {shard} AND token = {token})"))
        .collect();
    format!("({})", pairs.join(" OR "))
}

/// Renews the leases of `held` on `tx` if every token still holds its shard: what fences a
/// stamp, a dead letter's move or a change of the shard count on the same transaction. The
/// pairs go into the text, which stays prepared while the relay holds the same shards.
pub(super) async fn renewed_on<DB: Codec>(
    tx: &mut DB::Connection,
    sql: &RelaySql,
    held: &Held,
    lease_ms: i64,
) -> Result<bool, sqlx::Error> {
    let text = sql.renew.replace("{held}", &held_pairs(held));
    let query = sqlx::query(AssertSqlSafe(text)).arg(lease_ms);
    Ok(DB::run_query(tx, query).await? == held.len() as u64)
}
