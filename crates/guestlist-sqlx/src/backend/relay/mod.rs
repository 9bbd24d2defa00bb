//! The statements of the outbox's relay: its lease, the pending rows, their stamp, and the
//! figures operators read.

use std::future::Future;
use std::sync::Arc;

use guestlist_core::TableName;

use super::sealed::OutboxStatements;
use super::table::filler;

use super::statement::{Codec, Columns, Plain};

mod shared;

pub(crate) use shared::{dead_drop, renew, take};

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
    /// Stamps rows as published, keeping them ([`Stamp::Keep`]): on PostgreSQL one statement
    /// that also renews the lease (lease, token, ids); elsewhere the text before a literal list
    /// of ids.
    pub(crate) stamp: Arc<str>,
    /// Deletes published rows ([`Stamp::Delete`]), written as [`RelaySql::stamp`] is.
    pub(crate) delete: Arc<str>,
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
            lease: fill(DB::RELAY_LEASE),
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
    /// Sets its `published_at`, and the purge deletes it by age.
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
        })
    }
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
    /// Template of [`RelaySql::lease`].
    const RELAY_LEASE: &'static str;

    /// Takes the lease for `holder` if it has expired: the new token, or `None` while another
    /// relay holds it. Written for an update that returns the token.
    fn relay_take<'c>(
        conn: &'c mut Self::Connection,
        sql: &'c RelaySql,
        holder: &'c str,
        lease_ms: i64,
    ) -> impl Future<Output = Result<Option<i64>, sqlx::Error>> + Send + 'c {
        let taken = Self::fetch_first(conn, sql, Plain::reading(take, (holder, lease_ms)));
        async move { Ok(taken.await?.map(|(token,)| token)) }
    }

    /// Extends the lease if `token` still holds it: `true` when held.
    fn relay_renew<'c>(
        conn: &'c mut Self::Connection,
        sql: &'c RelaySql,
        token: i64,
        lease_ms: i64,
    ) -> impl Future<Output = Result<bool, sqlx::Error>> + Send + 'c {
        let renewed = Self::run(conn, sql, Plain::new(renew, (lease_ms, token)));
        async move { Ok(renewed.await? == 1) }
    }

    /// Gives the lease up so that a standing-by relay takes it at once.
    fn relay_release<'c>(
        conn: &'c mut Self::Connection,
        sql: &'c RelaySql,
        token: i64,
    ) -> impl Future<Output = Result<(), sqlx::Error>> + Send + 'c {
        let released = Self::run(
            conn,
            sql,
            Plain::new(|sql: &RelaySql| &sql.release, (token,)),
        );
        async move { released.await.map(drop) }
    }

    /// The oldest `limit` pending rows, oldest first, leaving out the rows `exclude` (in
    /// flight) and every row of the ordering keys `held` (their head failed). Written for the
    /// databases that cannot bind a list: the lists go into the text.
    fn relay_pending<'c>(
        conn: &'c mut Self::Connection,
        sql: &'c RelaySql,
        limit: i64,
        exclude: &'c [i64],
        held: &'c [String],
    ) -> impl Future<Output = Result<Vec<PendingRow>, sqlx::Error>> + Send + 'c {
        shared::pending_excluding::<Self>(conn, sql, limit, exclude, held)
    }

    /// Moves the pending row `id` to the outgoing dead letters with `reason`, if `token`
    /// still holds the lease (renewing it): `false` (and nothing moved) when it was lost.
    fn relay_bury<'c>(
        conn: &'c mut Self::Connection,
        sql: &'c RelaySql,
        token: i64,
        lease_ms: i64,
        id: i64,
        reason: &'c str,
    ) -> impl Future<Output = Result<bool, sqlx::Error>> + Send + 'c {
        shared::bury_in_transaction::<Self>(conn, sql, token, lease_ms, id, reason)
    }

    /// Renews the lease and, if `token` still holds it, stamps the rows `ids` as published
    /// (deleting or keeping them, as `stamp` says), atomically: `false` (and nothing stamped)
    /// when the lease was lost. Written for the databases whose statements cannot do both in
    /// one: a transaction of its own.
    fn relay_stamp<'c>(
        conn: &'c mut Self::Connection,
        sql: &'c RelaySql,
        token: i64,
        lease_ms: i64,
        ids: &'c [i64],
        stamp: Stamp,
    ) -> impl Future<Output = Result<bool, sqlx::Error>> + Send + 'c {
        shared::stamp_in_transaction::<Self>(conn, sql, token, lease_ms, ids, stamp)
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
    ) -> impl Future<Output = Result<(i64, Option<i64>), sqlx::Error>> + Send + 'c {
        Self::fetch_one(conn, sql, Plain::reading(|sql: &RelaySql| &sql.backlog, ()))
    }

    /// The outbox's figures for operators.
    fn outbox_stats<'c>(
        conn: &'c mut Self::Connection,
        sql: &'c RelaySql,
    ) -> impl Future<Output = Result<OutboxStatsRow, sqlx::Error>> + Send + 'c {
        Self::fetch_one(conn, sql, Plain::reading(|sql: &RelaySql| &sql.stats, ()))
    }

    /// The lease as it stands.
    fn relay_lease<'c>(
        conn: &'c mut Self::Connection,
        sql: &'c RelaySql,
    ) -> impl Future<Output = Result<LeaseRow, sqlx::Error>> + Send + 'c {
        Self::fetch_one(conn, sql, Plain::reading(|sql: &RelaySql| &sql.lease, ()))
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
