//! The reads of a trace, one table after another: a table the database lacks is noted, not an
//! error.

use guestlist_core::TableName;

use super::ids::{carried_from, like_escaped};
use super::{Found, Seen, Sighting, Trace};
use crate::Error;
use crate::backend::Backend;
use crate::backend::relay::shard_count;
use crate::backend::statement::Plain;
use crate::backend::trace::{DeadTraceRow, KeyTraceRow, OutboxTraceRow, TraceSql};
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

impl<DB: Backend> Trace<DB> {
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
        for message_id in messages {
            let claims = Plain::reading(|sql: &TraceSql| &sql.inbox, (message_id.as_str(),));
            let claims: Result<Vec<(String, i64)>, _> =
                DB::fetch(&mut conn, &*self.sql, claims).await;
            for (handler, ms) in present::<DB, _>(claims, inbox, found)?.unwrap_or_default() {
                found.sightings.push(Sighting {
                    at: crate::unix_ms::time(ms),
                    table: inbox.to_owned(),
                    seen: Seen::Claimed {
                        handler,
                        message_id: message_id.clone(),
                    },
                });
            }
            let deferred = Plain::reading(|sql: &TraceSql| &sql.deferrals, (message_id.as_str(),));
            let deferred: Result<Vec<(String, i64, i64)>, _> =
                DB::fetch(&mut conn, &*self.sql, deferred).await;
            for (handler, deferrals, first_at) in
                present::<DB, _>(deferred, &deferrals_table, found)?.unwrap_or_default()
            {
                found.sightings.push(Sighting {
                    at: crate::unix_ms::time(first_at),
                    table: deferrals_table.clone(),
                    seen: Seen::Deferred {
                        handler,
                        message_id: message_id.clone(),
                        deferrals: u64::try_from(deferrals).unwrap_or(0),
                    },
                });
            }
            let dead = Plain::reading(|sql: &TraceSql| &sql.inbox_dead, (message_id.as_str(),));
            let dead: Result<Vec<(String, String, i64, i64)>, _> =
                DB::fetch(&mut conn, &*self.sql, dead).await;
            for (handler, reason, deliveries, dead_at) in
                present::<DB, _>(dead, &dead_table, found)?.unwrap_or_default()
            {
                found.sightings.push(Sighting {
                    at: crate::unix_ms::time(dead_at),
                    table: dead_table.clone(),
                    seen: Seen::GaveUp {
                        handler,
                        message_id: message_id.clone(),
                        reason,
                        deliveries: u64::try_from(deliveries).unwrap_or(0),
                    },
                });
            }
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
            let rows = Plain::reading(|sql: &TraceSql| &sql.outbox, (message_id.as_str(),));
            let rows: Result<Vec<OutboxTraceRow>, _> = DB::fetch(&mut conn, &*self.sql, rows).await;
            for (_, topic, ordering_key, seq, slot, created_ms, published_ms, by, by_token) in
                present::<DB, _>(rows, table, found)?.unwrap_or_default()
            {
                let slot = u16::try_from(slot).unwrap_or(0);
                let shard = guestlist_core::protocol::shard_of(slot, count);
                let relay = shards
                    .iter()
                    .find(|(s, ..)| *s == i64::from(shard))
                    .and_then(|(_, token, holder, left_ms, _)| {
                        let held = left_ms.is_some_and(|ms| ms >= 0);
                        holder
                            .clone()
                            .filter(|_| held)
                            .map(|holder| (holder, *token))
                    });
                let pending = published_ms.is_none();
                found.sightings.push(Sighting {
                    at: crate::unix_ms::time(created_ms),
                    table: table.to_owned(),
                    seen: Seen::Enqueued {
                        message_id: message_id.clone(),
                        topic,
                        ordering_key,
                        seq,
                        shard,
                        relay: relay.filter(|_| pending),
                        pending,
                    },
                });
                if let Some(ms) = published_ms {
                    found.sightings.push(Sighting {
                        at: crate::unix_ms::time(ms),
                        table: table.to_owned(),
                        seen: Seen::Published {
                            message_id: message_id.clone(),
                            relay: by.clone().zip(by_token),
                        },
                    });
                }
            }
            let dead = Plain::reading(|sql: &TraceSql| &sql.dead, (message_id.as_str(),));
            let dead: Result<Vec<DeadTraceRow>, _> = DB::fetch(&mut conn, &*self.sql, dead).await;
            for (id, topic, _, _, _, _, dead_ms, reason) in
                present::<DB, _>(dead, &dead_table, found)?.unwrap_or_default()
            {
                found.sightings.push(Sighting {
                    at: crate::unix_ms::time(dead_ms),
                    table: dead_table.clone(),
                    seen: Seen::DeadLettered {
                        message_id: message_id.clone(),
                        topic,
                        reason,
                        id,
                    },
                });
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
                |sql: &TraceSql| &sql.keys,
                (*exact, anywhere.as_str(), leading.as_str()),
            );
            let read: Result<Vec<KeyTraceRow>, _> = DB::fetch(&mut conn, &*self.sql, read).await;
            for row in present::<DB, _>(read, table.as_str(), found)?.unwrap_or_default() {
                let new = !keys.iter().any(|k| (&k.0, &k.1) == (&row.0, &row.1));
                if carried_from(&row.1, exact) && new {
                    keys.push(row);
                }
            }
        }
        for (scope, key, status, attempt, created_ms, lease_left_ms, body_bytes) in keys {
            let body_bytes = body_bytes.and_then(|b| usize::try_from(b).ok());
            let state = key_state(status, body_bytes, lease_left_ms);
            found.sightings.push(Sighting {
                at: crate::unix_ms::time(created_ms),
                table: table.as_str().to_owned(),
                seen: Seen::Key {
                    scope,
                    key,
                    state,
                    attempt: u64::try_from(attempt).unwrap_or(0),
                },
            });
        }
        Ok(())
    }
}
