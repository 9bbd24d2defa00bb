//! The pending rows a relay reads next: the oldest of its shards, leaving out the rows in flight
//! and the keys whose head failed.

use std::future::Future;

use sqlx::AssertSqlSafe;

use super::{RelaySql, id_list};
use crate::backend::sealed::OutboxStatements;
use crate::backend::statement::{Args, Codec, Columns};

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
    /// Its slot: its shard is this modulo the table's shard count.
    pub(crate) slot: i64,
}

impl PendingRow {
    /// The row's shard when the table has `count` shards.
    pub(crate) fn shard(&self, count: u32) -> u32 {
        let slot = u16::try_from(self.slot).unwrap_or(0);
        guestlist_core::protocol::shard_of(slot, count)
    }
}

impl guestlist_core::protocol::SettledRow for PendingRow {
    fn id(&self) -> i64 {
        self.id
    }

    fn ordering_key(&self) -> Option<&str> {
        self.ordering_key.as_deref()
    }
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
            slot: 0,
        }
    }
}

impl Columns for PendingRow {
    fn read<DB: Codec>(row: &DB::Row) -> Result<Self, sqlx::Error> {
        Ok(Self {
            id: DB::get(row, 0)?,
            message_id: DB::get(row, 1)?,
            topic: DB::get(row, 2)?,
            ordering_key: DB::get(row, 3)?,
            seq: DB::get(row, 4)?,
            headers: DB::get(row, 5)?,
            payload: DB::get(row, 6)?,
            slot: DB::get(row, 7)?,
        })
    }
}

/// What a relay reads next: at most `limit` pending rows of `shards` (of `count`), leaving out
/// the rows `exclude` and the ordering keys `held`.
#[derive(Debug, Clone, Copy)]
#[allow(unreachable_pub)] // named by the sealed traits, unreachable outside the crate
pub struct Pending<'a> {
    pub(crate) limit: i64,
    pub(crate) exclude: &'a [i64],
    pub(crate) held: &'a [String],
    pub(crate) count: u32,
    pub(crate) shards: &'a [u32],
}

impl Pending<'_> {
    /// Whether the relay reads only some shards: all of them need no filter.
    pub(crate) fn filters_shards(&self) -> bool {
        (self.shards.len() as u64) < u64::from(self.count.max(1))
    }
}

/// The pending rows' statements. Sealed: implemented here for the three backends.
#[allow(unreachable_pub)]
pub trait PendingStatements: OutboxStatements {
    /// Template of [`RelaySql::pending`].
    const RELAY_PENDING: &'static str;
    /// How a held ordering key is written into the text where a list cannot be bound: the
    /// text before and after its bytes in hex (SQLite, MySQL); unused where it is bound.
    const HEX_KEY: (&'static str, &'static str) = ("", "");

    /// The oldest `limit` pending rows of the `shards` (of `count`) a relay publishes, oldest
    /// first, leaving out the rows `exclude` (in flight) and every row of the ordering keys
    /// `held` (their head failed). Written for the databases that cannot bind a list: the
    /// lists go into the text, which is then not kept as a prepared statement (every list
    /// differs).
    fn relay_pending<'c>(
        conn: &'c mut Self::Connection,
        sql: &'c RelaySql,
        pending: Pending<'c>,
    ) -> impl Future<Output = Result<Vec<PendingRow>, sqlx::Error>> + Send + 'c {
        pending_excluding::<Self>(conn, sql, pending)
    }
}

/// [`PendingStatements::relay_pending`] with the lists in the text.
async fn pending_excluding<DB: PendingStatements>(
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
