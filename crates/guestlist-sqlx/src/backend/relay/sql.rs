//! The relay's SQL text for one outbox, formatted once when the [`crate::Relay`] is built: each
//! statement's template is a constant of the concern that runs it.

use std::sync::Arc;

use guestlist_core::TableName;

use super::{RelayStatements, Stamp};
use crate::backend::table::filler;

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
    /// A dead letter's headers and body: its id.
    pub(crate) dead_read: Arc<str>,
    /// Rewrites a dead letter's headers and body: headers, body, id.
    pub(crate) dead_edit: Arc<str>,
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
            dead_read: fill(DB::DEAD_READ),
            dead_edit: fill(DB::DEAD_EDIT),
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
