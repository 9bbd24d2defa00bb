//! The relay's code the backends share: the statements for those that cannot bind a list,
//! the stamp and the burial on one transaction under the lease, and the per-database methods
//! written once for every connection type.

#[cfg(any(feature = "postgres", feature = "sqlite", feature = "mysql"))]
use super::RelaySql;
#[cfg(any(feature = "sqlite", feature = "mysql"))]
use super::{PendingColumns, PendingRow, pending_rows};

/// `ids` as a literal SQL list: plain integers, formatted here, so nothing to escape.
#[cfg(any(feature = "sqlite", feature = "mysql"))]
fn id_list(ids: &[i64]) -> String {
    let list = ids.iter().map(i64::to_string).collect::<Vec<_>>();
    format!("({})", list.join(","))
}

/// The pending rows for the backends that cannot bind a list: the ids to leave out go into the
/// text, which is then not kept as a prepared statement (every list differs).
#[cfg(any(feature = "sqlite", feature = "mysql"))]
pub(crate) async fn pending_excluding<DB>(
    conn: &mut DB::Connection,
    sql: &RelaySql,
    limit: i64,
    exclude: &[i64],
    held: &[String],
) -> Result<Vec<PendingRow>, sqlx::Error>
where
    DB: crate::backend::Backend + sqlx::database::HasStatementCache,
    for<'q> i64: sqlx::Encode<'q, DB> + sqlx::Type<DB>,
    for<'r> PendingColumns: sqlx::FromRow<'r, DB::Row>,
{
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
    let columns: Vec<PendingColumns> = sqlx::query_as(sqlx::AssertSqlSafe(text))
        .persistent(exclusion.is_empty())
        .bind(limit)
        .fetch_all(DB::executor(conn))
        .await?;
    Ok(pending_rows(columns))
}

/// Stamps `ids` on a transaction after renewing the lease, for the backends whose statements
/// cannot do both in one: the stamp's text ends where the literal id list goes.
#[cfg(any(feature = "sqlite", feature = "mysql"))]
pub(crate) async fn stamp_in_transaction<DB>(
    conn: &mut DB::Connection,
    sql: &RelaySql,
    token: i64,
    lease_ms: i64,
    ids: &[i64],
) -> Result<bool, sqlx::Error>
where
    DB: crate::backend::Backend + sqlx::database::HasStatementCache,
    for<'q> i64: sqlx::Encode<'q, DB> + sqlx::Type<DB>,
{
    use sqlx::Connection;
    let mut tx = conn.begin().await?;
    if !renewed_on::<DB>(&mut tx, sql, token, lease_ms).await? {
        return Ok(false);
    }
    if !ids.is_empty() {
        let list = ids.iter().map(i64::to_string).collect::<Vec<_>>().join(",");
        // Plain integers, formatted here: nothing to escape, and not kept as a prepared
        // statement since every batch's list differs.
        let stamp = format!("{}({list})", sql.stamp);
        sqlx::query(sqlx::AssertSqlSafe(stamp))
            .persistent(false)
            .execute(DB::executor(&mut tx))
            .await?;
    }
    tx.commit().await?;
    Ok(true)
}

/// Renews the lease on `tx` if `token` still holds it: what fences a stamp or a dead letter's
/// move on the same transaction.
#[cfg(any(feature = "postgres", feature = "sqlite", feature = "mysql"))]
async fn renewed_on<DB>(
    tx: &mut DB::Connection,
    sql: &RelaySql,
    token: i64,
    lease_ms: i64,
) -> Result<bool, sqlx::Error>
where
    DB: crate::backend::Backend + sqlx::database::HasStatementCache,
    for<'q> i64: sqlx::Encode<'q, DB> + sqlx::Type<DB>,
{
    let renewed = sqlx::query(sqlx::AssertSqlSafe(sql.renew.clone()))
        .bind(lease_ms)
        .bind(token)
        .execute(DB::executor(tx))
        .await?;
    Ok(DB::rows_affected(&renewed) == 1)
}

/// Moves the row `id` to the dead letters on a transaction after renewing the lease: the lease
/// fences the move as it fences a stamp.
#[cfg(any(feature = "postgres", feature = "sqlite", feature = "mysql"))]
pub(crate) async fn bury_in_transaction<DB>(
    conn: &mut DB::Connection,
    sql: &RelaySql,
    token: i64,
    lease_ms: i64,
    id: i64,
    reason: &str,
) -> Result<bool, sqlx::Error>
where
    DB: crate::backend::Backend + sqlx::database::HasStatementCache,
    for<'q> i64: sqlx::Encode<'q, DB> + sqlx::Type<DB>,
    for<'q> &'q str: sqlx::Encode<'q, DB> + sqlx::Type<DB>,
{
    use sqlx::Connection;
    let mut tx = conn.begin().await?;
    if !renewed_on::<DB>(&mut tx, sql, token, lease_ms).await? {
        return Ok(false);
    }
    sqlx::query(sqlx::AssertSqlSafe(sql.bury.clone()))
        .bind(reason)
        .bind(id)
        .execute(DB::executor(&mut tx))
        .await?;
    sqlx::query(sqlx::AssertSqlSafe(sql.unpend.clone()))
        .bind(id)
        .execute(DB::executor(&mut tx))
        .await?;
    tx.commit().await?;
    Ok(true)
}

/// The relay's statements every backend runs the same way; only the connection type differs.
#[cfg(any(feature = "postgres", feature = "sqlite", feature = "mysql"))]
macro_rules! relay_same_everywhere {
    ($conn:ty, $db:ty) => {
        async fn relay_bury<'c>(
            conn: &'c mut $conn,
            sql: &'c $crate::backend::relay::RelaySql,
            token: i64,
            lease_ms: i64,
            id: i64,
            reason: &'c str,
        ) -> Result<bool, sqlx::Error> {
            $crate::backend::relay::bury_in_transaction::<$db>(
                conn, sql, token, lease_ms, id, reason,
            )
            .await
        }

        async fn relay_renew<'c>(
            conn: &'c mut $conn,
            sql: &'c $crate::backend::relay::RelaySql,
            token: i64,
            lease_ms: i64,
        ) -> Result<bool, sqlx::Error> {
            let done = sqlx::query(sqlx::AssertSqlSafe(sql.renew.clone()))
                .bind(lease_ms)
                .bind(token)
                .execute(conn)
                .await?;
            Ok(done.rows_affected() == 1)
        }

        async fn relay_release<'c>(
            conn: &'c mut $conn,
            sql: &'c $crate::backend::relay::RelaySql,
            token: i64,
        ) -> Result<(), sqlx::Error> {
            sqlx::query(sqlx::AssertSqlSafe(sql.release.clone()))
                .bind(token)
                .execute(conn)
                .await?;
            Ok(())
        }

        async fn dead_list<'c>(
            conn: &'c mut $conn,
            sql: &'c $crate::backend::relay::RelaySql,
            limit: i64,
        ) -> Result<Vec<$crate::backend::relay::DeadRow>, sqlx::Error> {
            sqlx::query_as(sqlx::AssertSqlSafe(sql.dead_list.clone()))
                .bind(limit)
                .fetch_all(conn)
                .await
        }

        async fn dead_retry<'c>(
            conn: &'c mut $conn,
            sql: &'c $crate::backend::relay::RelaySql,
            id: i64,
        ) -> Result<bool, sqlx::Error> {
            use sqlx::Connection;
            let mut tx = conn.begin().await?;
            let back = sqlx::query(sqlx::AssertSqlSafe(sql.dead_retry.clone()))
                .bind(id)
                .execute(&mut *tx)
                .await?;
            if back.rows_affected() == 0 {
                return Ok(false);
            }
            sqlx::query(sqlx::AssertSqlSafe(sql.dead_drop.clone()))
                .bind(id)
                .execute(&mut *tx)
                .await?;
            tx.commit().await?;
            Ok(true)
        }

        async fn dead_drop<'c>(
            conn: &'c mut $conn,
            sql: &'c $crate::backend::relay::RelaySql,
            id: i64,
        ) -> Result<bool, sqlx::Error> {
            let done = sqlx::query(sqlx::AssertSqlSafe(sql.dead_drop.clone()))
                .bind(id)
                .execute(conn)
                .await?;
            Ok(done.rows_affected() == 1)
        }

        async fn dead_count<'c>(
            conn: &'c mut $conn,
            sql: &'c $crate::backend::relay::RelaySql,
        ) -> Result<i64, sqlx::Error> {
            sqlx::query_scalar(sqlx::AssertSqlSafe(sql.dead_count.clone()))
                .fetch_one(conn)
                .await
        }

        async fn outbox_backlog<'c>(
            conn: &'c mut $conn,
            sql: &'c $crate::backend::relay::RelaySql,
        ) -> Result<(i64, Option<i64>), sqlx::Error> {
            sqlx::query_as(sqlx::AssertSqlSafe(sql.backlog.clone()))
                .fetch_one(conn)
                .await
        }

        async fn outbox_stats<'c>(
            conn: &'c mut $conn,
            sql: &'c $crate::backend::relay::RelaySql,
        ) -> Result<$crate::backend::relay::OutboxStatsRow, sqlx::Error> {
            sqlx::query_as(sqlx::AssertSqlSafe(sql.stats.clone()))
                .fetch_one(conn)
                .await
        }

        async fn relay_lease<'c>(
            conn: &'c mut $conn,
            sql: &'c $crate::backend::relay::RelaySql,
        ) -> Result<$crate::backend::relay::LeaseRow, sqlx::Error> {
            sqlx::query_as(sqlx::AssertSqlSafe(sql.lease.clone()))
                .fetch_one(conn)
                .await
        }
    };
}
#[cfg(any(feature = "postgres", feature = "sqlite", feature = "mysql"))]
pub(crate) use relay_same_everywhere;

/// The relay's lease take where the update returns the new token (PostgreSQL, SQLite).
#[cfg(any(feature = "postgres", feature = "sqlite"))]
macro_rules! relay_take_returning {
    ($conn:ty) => {
        async fn relay_take<'c>(
            conn: &'c mut $conn,
            sql: &'c $crate::backend::relay::RelaySql,
            holder: &'c str,
            lease_ms: i64,
        ) -> Result<Option<i64>, sqlx::Error> {
            sqlx::query_scalar(sqlx::AssertSqlSafe(sql.take.clone()))
                .bind(holder)
                .bind(lease_ms)
                .fetch_optional(conn)
                .await
        }
    };
}
#[cfg(any(feature = "postgres", feature = "sqlite"))]
pub(crate) use relay_take_returning;

/// The relay's read and stamp where a list of ids cannot be bound (SQLite, MySQL): the lists go
/// into the text, and the stamp renews the lease on a transaction of its own.
#[cfg(any(feature = "sqlite", feature = "mysql"))]
macro_rules! relay_with_literal_lists {
    ($conn:ty, $db:ty) => {
        async fn relay_pending<'c>(
            conn: &'c mut $conn,
            sql: &'c $crate::backend::relay::RelaySql,
            limit: i64,
            exclude: &'c [i64],
            held: &'c [String],
        ) -> Result<Vec<$crate::backend::relay::PendingRow>, sqlx::Error> {
            $crate::backend::relay::pending_excluding::<$db>(conn, sql, limit, exclude, held).await
        }

        async fn relay_stamp<'c>(
            conn: &'c mut $conn,
            sql: &'c $crate::backend::relay::RelaySql,
            token: i64,
            lease_ms: i64,
            ids: &'c [i64],
        ) -> Result<bool, sqlx::Error> {
            $crate::backend::relay::stamp_in_transaction::<$db>(conn, sql, token, lease_ms, ids)
                .await
        }
    };
}
#[cfg(any(feature = "sqlite", feature = "mysql"))]
pub(crate) use relay_with_literal_lists;
