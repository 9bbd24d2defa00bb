//! The relay's code the backends share: where the statements used twice find their text, the
//! pending rows and the stamp for the databases that cannot bind a list, and the moves that
//! renew the lease on the same transaction.

use std::sync::Arc;

use sqlx::{AssertSqlSafe, Connection};

use super::{Held, Pending, PendingRow, RelaySql, RelayStatements, Stamp};
use crate::backend::statement::{Args, Codec, Columns, Plain, row};

/// The lease's take: holder, lease (ms).
pub(crate) fn take(sql: &RelaySql) -> &Arc<str> {
    &sql.take
}

/// A dead letter's deletion: its id.
pub(crate) fn dead_drop(sql: &RelaySql) -> &Arc<str> {
    &sql.dead_drop
}

/// `ids` as a literal SQL list: plain integers, formatted here, so nothing to escape.
fn id_list(ids: &[i64]) -> String {
    let list = ids.iter().map(i64::to_string).collect::<Vec<_>>();
    format!("({})", list.join(","))
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

/// The pending rows for the backends that cannot bind a list: the ids to leave out, the held
/// keys and the shards go into the text, which is then not kept as a prepared statement (every
/// list differs).
pub(crate) async fn pending_excluding<DB: RelayStatements>(
    conn: &mut DB::Connection,
    sql: &RelaySql,
    pending: Pending<'_>,
) -> Result<Vec<PendingRow>, sqlx::Error> {
    let mut exclusion = String::new();
    if !pending.exclude.is_empty() {
        exclusion.push_str(&format!(" AND id NOT IN {}", id_list(pending.exclude)));
    }
    if !pending.held.is_empty() {
        // Hex digits, formatted here: nothing to escape, whatever bytes the key holds.
        let (before, after) = DB::HEX_KEY;
        let keys: Vec<String> = pending
            .held
            .iter()
            .map(|key| format!("{before}{}{after}", hex::encode(key.as_bytes())))
            .collect();
        exclusion.push_str(&format!(
            " AND (ordering_key IS NULL OR ordering_key NOT IN ({}))",
            keys.join(",")
        ));
    }
    if pending.filters_shards() {
        let shards: Vec<i64> = pending.shards.iter().map(|s| i64::from(*s)).collect();
        exclusion.push_str(&format!(
            " AND slot % {} IN {}",
            pending.count.max(1),
            id_list(&shards)
        ));
    }
    let text = sql.pending.replace("{exclude}", &exclusion);
    let query = sqlx::query(AssertSqlSafe(text)).persistent(exclusion.is_empty());
    let rows = DB::fetch_query(conn, query.arg(pending.limit)).await?;
    rows.iter().map(PendingRow::read::<DB>).collect()
}

/// Stamps `ids` on a transaction after renewing the leases of `held`, for the backends whose
/// statements cannot do both in one: the stamp's text ends where the literal id list goes.
pub(crate) async fn stamp_in_transaction<DB: RelayStatements>(
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

/// Renews the leases of `held` on `conn` for the backends that cannot bind a list: `true` when
/// every token still held its shard.
pub(crate) async fn renew_held<DB: Codec>(
    conn: &mut DB::Connection,
    sql: &RelaySql,
    held: &Held,
    lease_ms: i64,
) -> Result<bool, sqlx::Error> {
    renewed_on::<DB>(conn, sql, held, lease_ms).await
}

/// Renews the leases of `held` on `tx` if every token still holds its shard: what fences a
/// stamp or a dead letter's move on the same transaction. The pairs go into the text, which
/// stays prepared while the relay holds the same shards.
async fn renewed_on<DB: Codec>(
    tx: &mut DB::Connection,
    sql: &RelaySql,
    held: &Held,
    lease_ms: i64,
) -> Result<bool, sqlx::Error> {
    let text = sql.renew.replace("{held}", &held_pairs(held));
    let query = sqlx::query(AssertSqlSafe(text)).arg(lease_ms);
    Ok(DB::run_query(tx, query).await? == held.len() as u64)
}

/// Moves the row `id` to the dead letters on a transaction after renewing the leases: they
/// fence the move as they fence a stamp.
pub(crate) async fn bury_in_transaction<DB: Codec>(
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

/// Puts the dead letter `id` back in the outbox and deletes it, on one transaction: `false`
/// when there is no such dead letter.
pub(crate) async fn retry_in_transaction<DB: Codec>(
    conn: &mut DB::Connection,
    sql: &RelaySql,
    id: i64,
) -> Result<bool, sqlx::Error> {
    let mut tx = conn.begin().await?;
    let retry = Plain::new(|sql: &RelaySql| &sql.dead_retry, (id,));
    if DB::run(&mut tx, sql, retry).await? == 0 {
        return Ok(false);
    }
    DB::run(&mut tx, sql, Plain::new(dead_drop, (id,))).await?;
    tx.commit().await?;
    Ok(true)
}

/// Changes the table's shard count to `count` on one transaction, under the leases of every
/// shard (`held`): drops the shards past it, adds the missing ones, and gives every lease up
/// with the new count, so that a relay takes a shard only under it.
pub(crate) async fn reshard_in_transaction<DB: Codec>(
    conn: &mut DB::Connection,
    sql: &RelaySql,
    held: &Held,
    count: u32,
) -> Result<bool, sqlx::Error> {
    let count = i64::from(count.max(1));
    let mut tx = conn.begin().await?;
    if !renewed_on::<DB>(&mut tx, sql, held, 60_000).await? {
        return Ok(false);
    }
    if held.len() == 1 && count > 1 {
        slot_unslotted::<DB>(&mut tx, sql).await?;
    }
    let drop = Plain::new(|sql: &RelaySql| &sql.reshard_drop, (count,));
    DB::run(&mut tx, sql, drop).await?;
    for shard in 0..count {
        let add = Plain::new(|sql: &RelaySql| &sql.reshard_add, (shard, count));
        DB::run(&mut tx, sql, add).await?;
    }
    // Every shard starts again from the highest token given so far (the change holds every
    // shard, so its tokens are the newest): a shard dropped and later added back never hands
    // out a token that a relay from before the drop still holds.
    let newest = held.iter().map(|(_, token)| *token).max().unwrap_or(0);
    let set = Plain::new(|sql: &RelaySql| &sql.reshard_set, (count, newest));
    DB::run(&mut tx, sql, set).await?;
    tx.commit().await?;
    Ok(true)
}

row! {
    /// A pending row of slot 0 as read, to be given its own slot.
    struct UnslottedRow {
        id: i64,
        ordering_key: Option<String>,
        message_id: String,
    }
}

/// Gives the pending rows of slot 0 their own slot, as the table goes from one shard to more:
/// the rows of a table made before shards, or written by a writer from before them, all have
/// slot 0 (one shard had no need of more), and left there a key's older messages would sit on
/// shard 0 while its newer ones went to the key's own shard, two relays publishing the key at
/// once. A row whose slot is 0 by its hash keeps it.
async fn slot_unslotted<DB: Codec>(
    tx: &mut DB::Connection,
    sql: &RelaySql,
) -> Result<(), sqlx::Error> {
    let unslotted = Plain::reading(|sql: &RelaySql| &sql.unslotted, ());
    let rows: Vec<UnslottedRow> = DB::fetch(&mut *tx, sql, unslotted).await?;
    for row in rows {
        let key = row.ordering_key.as_deref();
        let slot = i64::from(guestlist_core::protocol::slot(key, &row.message_id));
        if slot != 0 {
            let set = Plain::new(|sql: &RelaySql| &sql.slot, (slot, row.id));
            DB::run(&mut *tx, sql, set).await?;
        }
    }
    Ok(())
}
