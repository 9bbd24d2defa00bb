//! The reads of a history, one table after another: a table the database lacks is noted, not an
//! error.

use std::sync::Arc;

use guestlist_core::TableName;

use super::ids::{carried_from, like_escaped};
use super::{Found, History, Holder, Seen, Sighting};
use crate::Error;
use crate::backend::Backend;
use crate::backend::history::{
    ClaimTraceRow, DeadTraceRow, DeferralTraceRow, GaveUpTraceRow, HistorySql, KeyTraceRow,
    OutboxTraceRow, StepTraceRow,
};
use crate::backend::relay::{ShardRow, shard_count};
use crate::backend::statement::{Columns, Plain};
use crate::keys::key_state;

/// A read's rows, or `None` (the table noted in `found`) when the table does not exist.
fn present<DB: Backend, T>(
    read: Result<T, sqlx::Error>,
    table: &str,
    found: &mut Found,
) -> Result<Option<T>, Error> {
    match read {
        Ok(rows) => Ok(Some(rows)),
        Err(err) if DB::is_missing_table(&err) => {
            if !found.missing.iter().any(|t| t == table) {
                found.missing.push(table.to_owned());
            }
            Ok(None)
        }
        Err(err) => Err(Error::Database(err)),
    }
}

/// What the tables saw of an id, at `at_ms` (Unix milliseconds) in `table`.
fn sight(found: &mut Found, at_ms: i64, table: &str, seen: Seen) {
    found.sightings.push(Sighting {
        at: crate::unix_ms::time(at_ms),
        table: table.to_owned(),
        seen,
    });
}

/// A message's steps as `found` tells them: each finished step, then each handler's run.
fn steps_seen(found: &mut Found, table: &str, message_id: &str, rows: Vec<StepTraceRow>) {
    let mut runs = Vec::new();
    for row in rows {
        if row.place == 0 {
            runs.push(row);
            continue;
        }
        let seen = Seen::StepDone {
            handler: row.handler,
            message_id: message_id.to_owned(),
            place: u32::try_from(row.place).unwrap_or(0),
            step: row.name,
            result_bytes: row
                .result_bytes
                .map_or(0, |b| u64::try_from(b).unwrap_or(0)),
        };
        sight(found, row.at_ms, table, seen);
    }
    for run in runs {
        let steps_done = found
            .sightings
            .iter()
            .filter(|s| {
                matches!(&s.seen, Seen::StepDone { handler, message_id: id, .. }
                if *handler == run.handler && id == message_id)
            })
            .count();
        let seen = Seen::StepsRun {
            handler: run.handler,
            message_id: message_id.to_owned(),
            lease_left_ms: run.left_ms,
            steps_done: u32::try_from(steps_done).unwrap_or(u32::MAX),
        };
        sight(found, run.at_ms, table, seen);
    }
}

impl<DB: Backend> History<DB> {
    /// The rows that the read at `text` finds of `message_id` in `table`: none where the
    /// database lacks the table (noted in `found`).
    async fn read<R: Columns + 'static>(
        &self,
        conn: &mut DB::Connection,
        text: fn(&HistorySql) -> &Arc<str>,
        message_id: &str,
        table: &str,
        found: &mut Found,
    ) -> Result<Vec<R>, Error> {
        let read = Plain::reading(text, (message_id,));
        let rows: Result<Vec<R>, _> = DB::fetch(conn, &*self.sql, read).await;
        Ok(present::<DB, _>(rows, table, found)?.unwrap_or_default())
    }

    /// Each handler's claim of each message, its deferrals, and its dead-lettering.
    pub(super) async fn find_in_inbox(
        &self,
        pool: &sqlx::Pool<DB>,
        messages: &[String],
        found: &mut Found,
    ) -> Result<(), Error> {
        let mut conn = pool.acquire().await?;
        let inbox = self.inbox.as_str();
        let deferrals_table = format!("{inbox}_deferrals");
        let dead_table = format!("{inbox}_dead");
        let steps_table = format!("{inbox}_steps");
        for message_id in messages {
            let claims: Vec<ClaimTraceRow> = self
                .read(&mut conn, |sql| &sql.inbox, message_id, inbox, found)
                .await?;
            for claim in claims {
                let seen = Seen::Claimed {
                    handler: claim.handler,
                    message_id: message_id.clone(),
                };
                sight(found, claim.at_ms, inbox, seen);
            }
            let deferred: Vec<DeferralTraceRow> = self
                .read(
                    &mut conn,
                    |sql| &sql.deferrals,
                    message_id,
                    &deferrals_table,
                    found,
                )
                .await?;
            for row in deferred {
                let seen = Seen::Deferred {
                    handler: row.handler,
                    message_id: message_id.clone(),
                    deferrals: u64::try_from(row.deferrals).unwrap_or(0),
                };
                sight(found, row.first_ms, &deferrals_table, seen);
            }
            let dead: Vec<GaveUpTraceRow> = self
                .read(
                    &mut conn,
                    |sql| &sql.inbox_dead,
                    message_id,
                    &dead_table,
                    found,
                )
                .await?;
            for row in dead {
                let seen = Seen::GaveUp {
                    handler: row.handler,
                    message_id: message_id.clone(),
                    reason: row.reason,
                    deliveries: u64::try_from(row.deliveries).unwrap_or(0),
                };
                sight(found, row.at_ms, &dead_table, seen);
            }
            let steps: Vec<StepTraceRow> = self
                .read(&mut conn, |sql| &sql.steps, message_id, &steps_table, found)
                .await?;
            steps_seen(found, &steps_table, message_id, steps);
        }
        Ok(())
    }

    /// Each message's row in the outbox (with its shard and the relay holding it) and in the
    /// outgoing dead letters.
    pub(super) async fn find_in_outbox(
        &self,
        pool: &sqlx::Pool<DB>,
        messages: &[String],
        found: &mut Found,
    ) -> Result<(), Error> {
        let mut conn = pool.acquire().await?;
        let table = self.outbox.table().as_str();
        let dead_table = format!("{table}_dead");
        let shards = DB::relay_shards(&mut conn, &self.outbox.relay).await;
        let shards =
            present::<DB, _>(shards, &format!("{table}_relay"), found)?.unwrap_or_default();
        let count = shard_count(&shards);
        for message_id in messages {
            let rows: Vec<OutboxTraceRow> = self
                .read(&mut conn, |sql| &sql.outbox, message_id, table, found)
                .await?;
            for row in rows {
                let slot = u16::try_from(row.slot).unwrap_or(0);
                let shard = guestlist_core::protocol::shard_of(slot, count);
                let relay = shards
                    .iter()
                    .find(|lease| lease.shard == i64::from(shard))
                    .and_then(ShardRow::holder_now);
                let pending = row.published_ms.is_none();
                let enqueued = Seen::Enqueued {
                    message_id: message_id.clone(),
                    topic: row.topic,
                    ordering_key: row.ordering_key,
                    seq: row.seq,
                    shard,
                    relay: relay.filter(|_| pending),
                    pending,
                };
                sight(found, row.created_ms, table, enqueued);
                if let Some(ms) = row.published_ms {
                    let published = Seen::Published {
                        message_id: message_id.clone(),
                        relay: row
                            .published_by
                            .zip(row.published_token)
                            .map(|(relay, token)| Holder { relay, token }),
                    };
                    sight(found, ms, table, published);
                }
            }
            let dead: Vec<DeadTraceRow> = self
                .read(&mut conn, |sql| &sql.dead, message_id, &dead_table, found)
                .await?;
            for row in dead {
                let seen = Seen::DeadLettered {
                    message_id: message_id.clone(),
                    topic: row.topic,
                    reason: row.reason,
                    id: row.id,
                };
                sight(found, row.dead_ms, &dead_table, seen);
            }
        }
        Ok(())
    }

    /// The keys that are `id` or one of the messages, or were carried from them.
    pub(super) async fn find_in_keys(
        &self,
        pool: &sqlx::Pool<DB>,
        id: &str,
        messages: &[String],
        found: &mut Found,
    ) -> Result<(), Error> {
        let mut conn = pool.acquire().await?;
        let table: &TableName = &self.keys;
        let mut keys: Vec<KeyTraceRow> = Vec::new();
        let mut wanted: Vec<&str> = vec![id];
        wanted.extend(messages.iter().map(String::as_str));
        wanted.dedup();
        for exact in &wanted {
            let escaped = like_escaped(exact);
            let (anywhere, leading) = (format!("%:{escaped}/%"), format!("{escaped}/%"));
            let read = Plain::reading(
                |sql: &HistorySql| &sql.keys,
                (*exact, anywhere.as_str(), leading.as_str()),
            );
            let read: Result<Vec<KeyTraceRow>, _> = DB::fetch(&mut conn, &*self.sql, read).await;
            for row in present::<DB, _>(read, table.as_str(), found)?.unwrap_or_default() {
                let new = !keys
                    .iter()
                    .any(|k| (&k.scope, &k.key) == (&row.scope, &row.key));
                if carried_from(&row.key, exact) && new {
                    keys.push(row);
                }
            }
        }
        for row in keys {
            let body_bytes = row.body_bytes.and_then(|b| usize::try_from(b).ok());
            let state = key_state(row.status, body_bytes, row.lease_left_ms);
            let seen = Seen::Key {
                scope: row.scope,
                key: row.key,
                state,
                attempt: u64::try_from(row.attempt).unwrap_or(0),
            };
            sight(found, row.created_ms, table.as_str(), seen);
        }
        Ok(())
    }
}
