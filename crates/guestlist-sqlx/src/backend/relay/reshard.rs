//! A change of the table's shard count, under the leases of every shard: the shards past it
//! dropped, the missing ones added, every lease given up with the new count; a table going from
//! one shard to more gives its rows of slot 0 their own slots first.

use std::future::Future;

use sqlx::Connection;

use super::RelaySql;
use super::lease::{Held, renewed_on};
use crate::backend::sealed::OutboxStatements;
use crate::backend::statement::{Codec, Plain, row};

/// The change's statements. Sealed: implemented here for the three backends.
#[allow(unreachable_pub)]
pub trait ReshardStatements: OutboxStatements {
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

    /// Changes the table's shard count to `count` under the leases of every shard (`held`),
    /// giving them all up: `false` (and nothing changed) when one was lost.
    fn relay_reshard<'c>(
        conn: &'c mut Self::Connection,
        sql: &'c RelaySql,
        held: &'c Held,
        count: u32,
    ) -> impl Future<Output = Result<bool, sqlx::Error>> + Send + 'c {
        reshard_in_transaction::<Self>(conn, sql, held, count)
    }
}

/// Changes the table's shard count to `count` on one transaction, under the leases of every
/// shard (`held`): drops the shards past it, adds the missing ones, and gives every lease up
/// with the new count, so that a relay takes a shard only under it.
async fn reshard_in_transaction<DB: Codec>(
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
