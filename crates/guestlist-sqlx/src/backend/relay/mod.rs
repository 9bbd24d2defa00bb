//! The statements of the outbox's relay: its lease, the pending rows, their stamp, and the
//! figures operators read.

use std::future::Future;
use std::sync::Arc;

use guestlist_core::TableName;

use super::sealed::OutboxStatements;
use super::table::filler;

use super::statement::{Codec, Columns, Plain, row};

mod shared;

pub(crate) use shared::{dead_drop, take};

/// SQL text for one outbox's relay, formatted once when the [`crate::Relay`] is built.
#[derive(Debug)]
#[allow(unreachable_pub)] // named by the sealed traits, unreachable outside the crate
pub struct RelaySql {
    /// Takes a shard's lease if it has expired and the table's shard count is the one the relay
    /// planned with: holder, lease (ms), shard, count; the new token (MySQL reads it with
    /// [`RelaySql::read_token`]).
    pub(crate) take: Arc<str>,
    /// Reads a shard's token after a take (MySQL only; empty elsewhere): shard.
    #[cfg_attr(not(feature = "mysql"), allow(dead_code))]
    pub(crate) read_token: Arc<str>,
    /// Extends the leases of the shards held if every token still holds its own: on PostgreSQL
    /// lease (ms), shards, tokens, and whether all held; elsewhere `{held}` stands where the
    /// literal pairs go, lease (ms) bound, and the rows changed tell.
    pub(crate) renew: Arc<str>,
    /// Gives a shard's lease up at once: shard, token.
    pub(crate) release: Arc<str>,
    /// The oldest pending rows of the shards a relay publishes, at most a number, leaving out
    /// the rows in flight: limit, and on PostgreSQL the ids to leave out, the held keys, the
    /// shard count and the shards (elsewhere the text holds `{exclude}` where the literal
    /// filters go).
    pub(crate) pending: Arc<str>,
    /// Stamps rows as published, keeping them ([`Stamp::Keep`]): on PostgreSQL one statement
    /// that also renews the leases (lease, shards, tokens, ids); elsewhere the text before a
    /// literal list of ids.
    pub(crate) stamp: Arc<str>,
    /// Deletes published rows ([`Stamp::Delete`]), written as [`RelaySql::stamp`] is.
    pub(crate) delete: Arc<str>,
    /// Moves a pending row to `{table}_dead`: the reason, the row's id (run after the leases'
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
    /// Every shard's lease: shard, token, holder, milliseconds left, shard count.
    pub(crate) shards: Arc<str>,
    /// Pending rows per shard: count; shard, pending, the oldest one's age (ms).
    pub(crate) lag: Arc<str>,
    /// A relay's heartbeat in the registry: holder, lease (ms).
    pub(crate) beat: Arc<str>,
    /// Forgets relays not seen for an hour.
    pub(crate) sweep: Arc<str>,
    /// The relays whose heartbeat holds, by holder.
    pub(crate) live: Arc<str>,
    /// A relay leaves the registry: holder.
    pub(crate) leave: Arc<str>,
    /// Drops the shards from a number up (a lowered count): count.
    pub(crate) reshard_drop: Arc<str>,
    /// Adds a shard's row unless there: shard, count.
    pub(crate) reshard_add: Arc<str>,
    /// The pending rows of slot 0: id, ordering key, message id.
    pub(crate) unslotted: Arc<str>,
    /// Sets a row's slot: slot, id.
    pub(crate) slot: Arc<str>,
    /// Sets every shard's count and token (the newest given) and gives every lease up: count,
    /// token.
    pub(crate) reshard_set: Arc<str>,
}

impl RelaySql {
    pub(crate) fn new<DB: RelayStatements>(table: &TableName) -> Self {
        let fill = filler(table);
        Self {
            take: fill(DB::RELAY_TAKE),
            read_token: fill(DB::RELAY_READ_TOKEN),
            renew: fill(DB::RELAY_RENEW),
            release: fill(DB::RELAY_RELEASE),
            pending: fill(DB::RELAY_PENDING),
            stamp: fill(DB::RELAY_STAMP),
            delete: fill(DB::RELAY_DELETE),
            bury: fill(DB::RELAY_BURY),
            unpend: fill(DB::RELAY_UNPEND),
            dead_list: fill(DB::DEAD_LIST),
            dead_retry: fill(DB::DEAD_RETRY),
            dead_drop: fill(DB::DEAD_DROP),
            dead_count: fill(DB::DEAD_COUNT),
            backlog: fill(DB::OUTBOX_BACKLOG),
            stats: fill(DB::OUTBOX_STATS),
            shards: fill(DB::RELAY_SHARDS),
            lag: fill(DB::RELAY_LAG),
            beat: fill(DB::RELAY_BEAT),
            sweep: fill(DB::RELAY_SWEEP),
            live: fill(DB::RELAY_LIVE),
            leave: fill(DB::RELAY_LEAVE),
            reshard_drop: fill(DB::RESHARD_DROP),
            reshard_add: fill(DB::RESHARD_ADD),
            reshard_set: fill(DB::RESHARD_SET),
            unslotted: fill(DB::RESHARD_UNSLOTTED),
            slot: fill(DB::RESHARD_SLOT),
        }
    }
}

impl RelaySql {
    /// The text of the stamp `stamp`.
    pub(crate) fn stamp(&self, stamp: Stamp) -> &Arc<str> {
        match stamp {
            Stamp::Delete => &self.delete,
            Stamp::Keep => &self.stamp,
        }
    }
}

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
    /// An outgoing dead letter as read.
    #[allow(unreachable_pub)] // named by the sealed traits, unreachable outside the crate
    pub struct DeadRow {
        id: i64,
        message_id: String,
        topic: String,
        ordering_key: Option<String>,
        seq: i64,
        reason: String,
        /// Its age in milliseconds.
        age_ms: Option<i64>,
        /// Its body's size in bytes.
        bytes: i64,
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
    pub(crate) fn holder_now(&self) -> Option<crate::trace::Holder> {
        let relay = self.holder.clone().filter(|_| self.held())?;
        Some(crate::trace::Holder {
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

/// The shards a relay holds, each with its token.
#[allow(unreachable_pub)] // named by the sealed traits, unreachable outside the crate
pub type Held = [(u32, i64)];

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
    /// Template of [`RelaySql::delete`].
    const RELAY_DELETE: &'static str;
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
    /// Template of [`RelaySql::shards`].
    const RELAY_SHARDS: &'static str;
    /// Template of [`RelaySql::lag`].
    const RELAY_LAG: &'static str;
    /// Template of [`RelaySql::beat`].
    const RELAY_BEAT: &'static str;
    /// Template of [`RelaySql::sweep`].
    const RELAY_SWEEP: &'static str;
    /// Template of [`RelaySql::live`].
    const RELAY_LIVE: &'static str;
    /// Template of [`RelaySql::leave`].
    const RELAY_LEAVE: &'static str;
    /// Template of [`RelaySql::reshard_drop`].
    const RESHARD_DROP: &'static str;
    /// Template of [`RelaySql::reshard_add`].
    const RESHARD_ADD: &'static str;
    /// Template of [`RelaySql::reshard_set`].
    const RESHARD_SET: &'static str;
    /// Template of [`RelaySql::unslotted`].
    const RESHARD_UNSLOTTED: &'static str = "SELECT id, ordering_key, message_id FROM {table} \
         WHERE published_at IS NULL AND slot = 0";
    /// Template of [`RelaySql::slot`].
    const RESHARD_SLOT: &'static str = "UPDATE {table} SET slot = $1 WHERE id = $2";

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
        shared::renew_held::<Self>(conn, sql, held, lease_ms)
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

    /// The oldest `limit` pending rows of the `shards` (of `count`) a relay publishes, oldest
    /// first, leaving out the rows `exclude` (in flight) and every row of the ordering keys
    /// `held` (their head failed). Written for the databases that cannot bind a list: the
    /// lists go into the text.
    fn relay_pending<'c>(
        conn: &'c mut Self::Connection,
        sql: &'c RelaySql,
        pending: Pending<'c>,
    ) -> impl Future<Output = Result<Vec<PendingRow>, sqlx::Error>> + Send + 'c {
        shared::pending_excluding::<Self>(conn, sql, pending)
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
        shared::bury_in_transaction::<Self>(conn, sql, held, lease_ms, id, reason)
    }

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
        shared::stamp_in_transaction::<Self>(conn, sql, held, lease_ms, ids, stamp)
    }

    /// The oldest `limit` dead letters.
    fn dead_list<'c>(
        conn: &'c mut Self::Connection,
        sql: &'c RelaySql,
        limit: i64,
    ) -> impl Future<Output = Result<Vec<DeadRow>, sqlx::Error>> + Send + 'c {
        Self::fetch(
            conn,
            sql,
            Plain::reading(|sql: &RelaySql| &sql.dead_list, (limit,)),
        )
    }

    /// Puts the dead letter `id` back in the outbox (a new pending row, published after what is
    /// pending now) and deletes it: `false` when there is no such dead letter.
    fn dead_retry<'c>(
        conn: &'c mut Self::Connection,
        sql: &'c RelaySql,
        id: i64,
    ) -> impl Future<Output = Result<bool, sqlx::Error>> + Send + 'c {
        shared::retry_in_transaction::<Self>(conn, sql, id)
    }

    /// Deletes the dead letter `id`: `false` when there is none.
    fn dead_drop<'c>(
        conn: &'c mut Self::Connection,
        sql: &'c RelaySql,
        id: i64,
    ) -> impl Future<Output = Result<bool, sqlx::Error>> + Send + 'c {
        let dropped = Self::run(conn, sql, Plain::new(dead_drop, (id,)));
        async move { Ok(dropped.await? == 1) }
    }

    /// How many dead letters there are.
    fn dead_count<'c>(
        conn: &'c mut Self::Connection,
        sql: &'c RelaySql,
    ) -> impl Future<Output = Result<i64, sqlx::Error>> + Send + 'c {
        let count = Self::fetch_one(
            conn,
            sql,
            Plain::reading(|sql: &RelaySql| &sql.dead_count, ()),
        );
        async move {
            let (count,): (i64,) = count.await?;
            Ok(count)
        }
    }

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

    /// Changes the table's shard count to `count` under the leases of every shard (`held`),
    /// giving them all up: `false` (and nothing changed) when one was lost.
    fn relay_reshard<'c>(
        conn: &'c mut Self::Connection,
        sql: &'c RelaySql,
        held: &'c Held,
        count: u32,
    ) -> impl Future<Output = Result<bool, sqlx::Error>> + Send + 'c {
        shared::reshard_in_transaction::<Self>(conn, sql, held, count)
    }

    /// Something that wakes the relay when messages commit: a `LISTEN` on PostgreSQL, nothing
    /// elsewhere (the relay polls).
    fn listen<'p>(
        pool: &'p sqlx::Pool<Self>,
        channel: &'p str,
    ) -> impl Future<Output = Result<crate::backend::Wake, sqlx::Error>> + Send + 'p {
        let _ = (pool, channel);
        async { Ok(crate::backend::Wake::polling()) }
    }
}
