//! The statements of the outbox's relay: its lease, the pending rows, their stamp, and the
//! figures operators read.

use std::future::Future;
use std::sync::Arc;

use guestlist_core::TableName;

use super::sealed::OutboxStatements;

/// SQL text for one outbox's relay, formatted once when the [`crate::Relay`] is built.
#[derive(Debug)]
#[allow(unreachable_pub)] // named by the sealed traits, unreachable outside the crate
pub struct RelaySql {
    /// Takes the lease if it has expired: holder, lease (ms); the new token (MySQL reads it
    /// with [`RelaySql::read_token`]).
    pub(crate) take: Arc<str>,
    /// Reads the token after a take (MySQL only; empty elsewhere).
    #[cfg_attr(not(feature = "mysql"), allow(dead_code))]
    pub(crate) read_token: Arc<str>,
    /// Extends the lease if the token still holds it: lease (ms), token; 1 row when held.
    pub(crate) renew: Arc<str>,
    /// Gives the lease up at once: token.
    pub(crate) release: Arc<str>,
    /// The oldest pending rows, at most a number, leaving out the rows in flight: limit, and
    /// on PostgreSQL the ids to leave out (elsewhere the text holds `{exclude}` where a
    /// literal `AND id NOT IN (…)` goes).
    pub(crate) pending: Arc<str>,
    /// Stamps rows as published: on PostgreSQL one statement that also renews the lease
    /// (lease, token, ids); elsewhere the text before a literal list of ids.
    pub(crate) stamp: Arc<str>,
    /// Moves a pending row to `{table}_dead`: the reason, the row's id (run after the lease's
    /// renewal, on its transaction, followed by [`RelaySql::unpend`]).
    pub(crate) bury: Arc<str>,
    /// Deletes a pending row once buried: its id.
    pub(crate) unpend: Arc<str>,
    /// The outgoing dead letters, oldest first: limit.
    pub(crate) dead_list: Arc<str>,
    /// Puts a dead letter back in the outbox, as a new pending row: its id.
    pub(crate) dead_retry: Arc<str>,
    /// Deletes a dead letter: its id.
    pub(crate) dead_drop: Arc<str>,
    /// How many dead letters there are.
    pub(crate) dead_count: Arc<str>,
    /// Pending rows and the oldest one's age (ms).
    pub(crate) backlog: Arc<str>,
    /// Rows, pending rows, the oldest pending one's age (ms), table size (bytes).
    pub(crate) stats: Arc<str>,
    /// The lease's token, holder, and milliseconds left.
    pub(crate) lease: Arc<str>,
}

impl RelaySql {
    pub(crate) fn new<DB: RelayStatements>(table: &TableName) -> Self {
        let fill =
            |template: &str| -> Arc<str> { template.replace("{table}", table.as_str()).into() };
        Self {
            take: fill(DB::RELAY_TAKE),
            read_token: fill(DB::RELAY_READ_TOKEN),
            renew: fill(DB::RELAY_RENEW),
            release: fill(DB::RELAY_RELEASE),
            pending: fill(DB::RELAY_PENDING),
            stamp: fill(DB::RELAY_STAMP),
            bury: fill(DB::RELAY_BURY),
            unpend: fill(DB::RELAY_UNPEND),
            dead_list: fill(DB::DEAD_LIST),
            dead_retry: fill(DB::DEAD_RETRY),
            dead_drop: fill(DB::DEAD_DROP),
            dead_count: fill(DB::DEAD_COUNT),
            backlog: fill(DB::OUTBOX_BACKLOG),
            stats: fill(DB::OUTBOX_STATS),
            lease: fill(DB::RELAY_LEASE),
        }
    }
}

/// One pending row as the relay reads it.
#[derive(Debug, Clone)]
#[allow(unreachable_pub)] // named by the sealed traits, unreachable outside the crate
pub struct PendingRow {
    pub(crate) id: i64,
    pub(crate) message_id: String,
    pub(crate) topic: String,
    pub(crate) ordering_key: Option<String>,
    pub(crate) seq: i64,
    pub(crate) headers: Option<Vec<u8>>,
    pub(crate) payload: Vec<u8>,
}

#[cfg(test)]
impl PendingRow {
    /// A row of id `id` on `key`, for the relay's unit tests.
    pub(crate) fn for_test(id: i64, key: Option<&str>) -> Self {
        Self {
            id,
            message_id: format!("m{id}"),
            topic: "t".into(),
            ordering_key: key.map(str::to_owned),
            seq: id,
            headers: None,
            payload: Vec::new(),
        }
    }
}

/// A pending row's columns, in the order the statements name them.
pub(crate) type PendingColumns = (
    i64,
    String,
    String,
    Option<String>,
    i64,
    Option<Vec<u8>>,
    Vec<u8>,
);

impl From<PendingColumns> for PendingRow {
    fn from((id, message_id, topic, ordering_key, seq, headers, payload): PendingColumns) -> Self {
        Self {
            id,
            message_id,
            topic,
            ordering_key,
            seq,
            headers,
            payload,
        }
    }
}

/// Reads pending rows' columns into rows.
pub(crate) fn pending_rows(columns: Vec<PendingColumns>) -> Vec<PendingRow> {
    columns.into_iter().map(PendingRow::from).collect()
}

/// The outbox's figures as read: rows, pending, oldest pending age (ms), size (bytes).
#[allow(unreachable_pub)] // named by the sealed traits, unreachable outside the crate
pub type OutboxStatsRow = (i64, i64, Option<i64>, Option<i64>);

/// A dead letter as read: id, message id, topic, ordering key, seq, reason, age (ms), body
/// bytes.
#[allow(unreachable_pub)] // named by the sealed traits, unreachable outside the crate
pub type DeadRow = (
    i64,
    String,
    String,
    Option<String>,
    i64,
    String,
    Option<i64>,
    i64,
);

/// The lease as read: token, holder, milliseconds left (negative once expired).
#[allow(unreachable_pub)] // named by the sealed traits, unreachable outside the crate
pub type LeaseRow = (i64, Option<String>, Option<i64>);

/// The per-database half of the relay. Sealed: implemented here for the three backends.
#[allow(unreachable_pub)]
pub trait RelayStatements: OutboxStatements {
    /// Template of [`RelaySql::take`].
    const RELAY_TAKE: &'static str;
    /// Template of [`RelaySql::read_token`].
    const RELAY_READ_TOKEN: &'static str = "";
    /// Template of [`RelaySql::renew`].
    const RELAY_RENEW: &'static str;
    /// Template of [`RelaySql::release`].
    const RELAY_RELEASE: &'static str;
    /// Template of [`RelaySql::pending`].
    const RELAY_PENDING: &'static str;
    /// Template of [`RelaySql::stamp`].
    const RELAY_STAMP: &'static str;
    /// Template of [`RelaySql::bury`].
    const RELAY_BURY: &'static str;
    /// Template of [`RelaySql::unpend`].
    const RELAY_UNPEND: &'static str;
    /// Template of [`RelaySql::dead_list`]: id, message id, topic, ordering key, seq, reason,
    /// age (ms), body bytes.
    const DEAD_LIST: &'static str;
    /// Template of [`RelaySql::dead_retry`].
    const DEAD_RETRY: &'static str;
    /// Template of [`RelaySql::dead_drop`].
    const DEAD_DROP: &'static str = "DELETE FROM {table}_dead WHERE id = $1";
    /// Template of [`RelaySql::dead_count`].
    const DEAD_COUNT: &'static str = "SELECT COUNT(*) FROM {table}_dead";
    /// How a held ordering key is written into the text where a list cannot be bound: the
    /// text before and after its bytes in hex (SQLite, MySQL); unused where it is bound.
    const HEX_KEY: (&'static str, &'static str) = ("", "");
    /// Template of [`RelaySql::backlog`].
    const OUTBOX_BACKLOG: &'static str;
    /// Template of [`RelaySql::stats`].
    const OUTBOX_STATS: &'static str;
    /// Template of [`RelaySql::lease`].
    const RELAY_LEASE: &'static str;

    /// Takes the lease for `holder` if it has expired: the new token, or `None` while another
    /// relay holds it.
    fn relay_take<'c>(
        conn: &'c mut Self::Connection,
        sql: &'c RelaySql,
        holder: &'c str,
        lease_ms: i64,
    ) -> impl Future<Output = Result<Option<i64>, sqlx::Error>> + Send + 'c;

    /// Extends the lease if `token` still holds it: `true` when held.
    fn relay_renew<'c>(
        conn: &'c mut Self::Connection,
        sql: &'c RelaySql,
        token: i64,
        lease_ms: i64,
    ) -> impl Future<Output = Result<bool, sqlx::Error>> + Send + 'c;

    /// Gives the lease up so that a standing-by relay takes it at once.
    fn relay_release<'c>(
        conn: &'c mut Self::Connection,
        sql: &'c RelaySql,
        token: i64,
    ) -> impl Future<Output = Result<(), sqlx::Error>> + Send + 'c;

    /// The oldest `limit` pending rows, oldest first, leaving out the rows `exclude` (in
    /// flight) and every row of the ordering keys `held` (their head failed).
    fn relay_pending<'c>(
        conn: &'c mut Self::Connection,
        sql: &'c RelaySql,
        limit: i64,
        exclude: &'c [i64],
        held: &'c [String],
    ) -> impl Future<Output = Result<Vec<PendingRow>, sqlx::Error>> + Send + 'c;

    /// Moves the pending row `id` to the outgoing dead letters with `reason`, if `token`
    /// still holds the lease (renewing it): `false` (and nothing moved) when it was lost.
    fn relay_bury<'c>(
        conn: &'c mut Self::Connection,
        sql: &'c RelaySql,
        token: i64,
        lease_ms: i64,
        id: i64,
        reason: &'c str,
    ) -> impl Future<Output = Result<bool, sqlx::Error>> + Send + 'c;

    /// Renews the lease and, if `token` still holds it, stamps the rows `ids` as published,
    /// atomically: `false` (and nothing stamped) when the lease was lost.
    fn relay_stamp<'c>(
        conn: &'c mut Self::Connection,
        sql: &'c RelaySql,
        token: i64,
        lease_ms: i64,
        ids: &'c [i64],
    ) -> impl Future<Output = Result<bool, sqlx::Error>> + Send + 'c;

    /// The oldest `limit` dead letters.
    fn dead_list<'c>(
        conn: &'c mut Self::Connection,
        sql: &'c RelaySql,
        limit: i64,
    ) -> impl Future<Output = Result<Vec<DeadRow>, sqlx::Error>> + Send + 'c;

    /// Puts the dead letter `id` back in the outbox (a new pending row, published after what is
    /// pending now) and deletes it: `false` when there is no such dead letter.
    fn dead_retry<'c>(
        conn: &'c mut Self::Connection,
        sql: &'c RelaySql,
        id: i64,
    ) -> impl Future<Output = Result<bool, sqlx::Error>> + Send + 'c;

    /// Deletes the dead letter `id`: `false` when there is none.
    fn dead_drop<'c>(
        conn: &'c mut Self::Connection,
        sql: &'c RelaySql,
        id: i64,
    ) -> impl Future<Output = Result<bool, sqlx::Error>> + Send + 'c;

    /// How many dead letters there are.
    fn dead_count<'c>(
        conn: &'c mut Self::Connection,
        sql: &'c RelaySql,
    ) -> impl Future<Output = Result<i64, sqlx::Error>> + Send + 'c;

    /// Pending rows and the oldest one's age (ms).
    fn outbox_backlog<'c>(
        conn: &'c mut Self::Connection,
        sql: &'c RelaySql,
    ) -> impl Future<Output = Result<(i64, Option<i64>), sqlx::Error>> + Send + 'c;

    /// The outbox's figures for operators.
    fn outbox_stats<'c>(
        conn: &'c mut Self::Connection,
        sql: &'c RelaySql,
    ) -> impl Future<Output = Result<OutboxStatsRow, sqlx::Error>> + Send + 'c;

    /// The lease as it stands.
    fn relay_lease<'c>(
        conn: &'c mut Self::Connection,
        sql: &'c RelaySql,
    ) -> impl Future<Output = Result<LeaseRow, sqlx::Error>> + Send + 'c;

    /// Something that wakes the relay when messages commit: a `LISTEN` on PostgreSQL, nothing
    /// elsewhere (the relay polls).
    fn listen<'p>(
        pool: &'p sqlx::Pool<Self>,
        channel: &'p str,
    ) -> impl Future<Output = Result<crate::outbox::Wake, sqlx::Error>> + Send + 'p {
        let _ = (pool, channel);
        async { Ok(crate::outbox::Wake::polling()) }
    }
}

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
    DB: super::Backend + sqlx::database::HasStatementCache,
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
    DB: super::Backend + sqlx::database::HasStatementCache,
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
    DB: super::Backend + sqlx::database::HasStatementCache,
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
    DB: super::Backend + sqlx::database::HasStatementCache,
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
