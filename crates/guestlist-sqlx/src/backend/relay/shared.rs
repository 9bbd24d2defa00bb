//! The relay's code the backends share: where the statements used twice find their text, the
//! pending rows and the stamp for the databases that cannot bind a list, and the moves that
//! renew the lease on the same transaction.

use std::sync::Arc;

use sqlx::{AssertSqlSafe, Connection};

use super::{PendingRow, RelaySql, RelayStatements, Stamp};
use crate::backend::statement::{Args, Codec, Columns, Plain};

/// The lease's take: holder, lease (ms).
pub(crate) fn take(sql: &RelaySql) -> &Arc<str> {
    &sql.take
}

/// The lease's renewal: lease (ms), token.
pub(crate) fn renew(sql: &RelaySql) -> &Arc<str> {
    &sql.renew
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

/// The pending rows for the backends that cannot bind a list: the ids to leave out go into the
/// text, which is then not kept as a prepared statement (every list differs).
pub(crate) async fn pending_excluding<DB: RelayStatements>(
    conn: &mut DB::Connection,
    sql: &RelaySql,
    limit: i64,
    exclude: &[i64],
    held: &[String],
) -> Result<Vec<PendingRow>, sqlx::Error> {
    let mut exclusion = String::new();
    if !exclude.is_empty() {
        exclusion.push_str(&format!(" AND id NOT IN {}", id_list(exclude)));
    }
    if !held.is_empty() {
        // Hex digits, formatted here: nothing to escape, whatever bytes the key holds.
        let (before, after) = DB::HEX_KEY;
        let keys: Vec<String> = held
            .iter()
            .map(|key| format!("{before}{}{after}", hex::encode(key.as_bytes())))
            .collect();
        exclusion.push_str(&format!(
            " AND (ordering_key IS NULL OR ordering_key NOT IN ({}))",
            keys.join(",")
        ));
    }
    let text = sql.pending.replace("{exclude}", &exclusion);
    let query = sqlx::query(AssertSqlSafe(text)).persistent(exclusion.is_empty());
    let rows = DB::fetch_query(conn, query.arg(limit)).await?;
    rows.iter().map(PendingRow::read::<DB>).collect()
}

/// Stamps `ids` on a transaction after renewing the lease, for the backends whose statements
/// cannot do both in one: the stamp's text ends where the literal id list goes.
pub(crate) async fn stamp_in_transaction<DB: RelayStatements>(
    conn: &mut DB::Connection,
    sql: &RelaySql,
    token: i64,
    lease_ms: i64,
    ids: &[i64],
    stamp: Stamp,
) -> Result<bool, sqlx::Error> {
    let mut tx = conn.begin().await?;
    if !renewed_on::<DB>(&mut tx, sql, token, lease_ms).await? {
        return Ok(false);
    }
    if !ids.is_empty() {
        // Plain integers, formatted here: nothing to escape, and not kept as a prepared
        // statement since every batch's list differs.
        let stamp = format!("{}{}", sql.stamp(stamp), id_list(ids));
        let query = sqlx::query(AssertSqlSafe(stamp)).persistent(false);
        DB::run_query(&mut tx, query).await?;
    }
    tx.commit().await?;
    Ok(true)
}

/// Renews the lease on `tx` if `token` still holds it: what fences a stamp or a dead letter's
/// move on the same transaction.
async fn renewed_on<DB: Codec>(
    tx: &mut DB::Connection,
    sql: &RelaySql,
    token: i64,
    lease_ms: i64,
) -> Result<bool, sqlx::Error> {
    Ok(DB::run(tx, sql, Plain::new(renew, (lease_ms, token))).await? == 1)
}

/// Moves the row `id` to the dead letters on a transaction after renewing the lease: the lease
/// fences the move as it fences a stamp.
pub(crate) async fn bury_in_transaction<DB: Codec>(
    conn: &mut DB::Connection,
    sql: &RelaySql,
    token: i64,
    lease_ms: i64,
    id: i64,
    reason: &str,
) -> Result<bool, sqlx::Error> {
    let mut tx = conn.begin().await?;
    if !renewed_on::<DB>(&mut tx, sql, token, lease_ms).await? {
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
