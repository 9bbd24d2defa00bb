//! Incoming dead letters: the messages a consumer moved to its broker's dead-letter place
//! (poison: failed too often, or deferred past its limit), recorded in `<inbox table>_dead`
//! (created by [`Inbox::migrate`]) so that an operator sees them beside the guest list, in
//! `guestlist console` and `guestlist history`. The message itself is in the broker's dead-letter
//! place; replay it from there with the broker's tools.

use std::time::SystemTime;

use guestlist_core::{HandlerName, MessageId};

use crate::backend::InboxSql;
use crate::backend::inbox::DeadRow;
use crate::backend::statement::Plain;
use crate::{Backend, Error, Inbox};

/// A message a consumer's handler dead-lettered, as recorded.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct IncomingDeadLetter {
    /// The handler that gave up on it.
    pub handler: String,
    /// The message's id.
    pub message_id: String,
    /// Why.
    pub reason: String,
    /// The broker's delivery count when it was dead-lettered.
    pub deliveries: u32,
    /// When (the consumer's clock).
    pub at: SystemTime,
}

impl<DB: Backend> Inbox<DB> {
    /// Records that `handler` moved message `id` to the broker's dead-letter place after
    /// `deliveries` deliveries, for `reason`; a message dead-lettered again replaces its record.
    /// The consumer runtime records each one it dead-letters.
    pub async fn record_dead(
        &self,
        pool: &sqlx::Pool<DB>,
        handler: &HandlerName,
        id: &MessageId,
        reason: &str,
        deliveries: u32,
    ) -> Result<(), Error> {
        let now_ms = crate::unix_ms::now();
        let mut conn = pool.acquire().await?;
        let record = Plain::new(
            |sql: &InboxSql| &sql.record_dead,
            (
                handler.as_str(),
                id.as_str(),
                reason,
                i64::from(deliveries),
                now_ms,
            ),
        );
        DB::run(&mut conn, &*self.sql, record)
            .await
            .map(drop)
            .map_err(|err| self.error(err))
    }

    /// The incoming dead letters recorded, the newest first, `limit` at most.
    pub async fn dead_letters(
        &self,
        pool: &sqlx::Pool<DB>,
        limit: u32,
    ) -> Result<Vec<IncomingDeadLetter>, Error> {
        let mut conn = pool.acquire().await?;
        let list = Plain::reading(|sql: &InboxSql| &sql.dead_letters, (i64::from(limit),));
        let rows: Vec<DeadRow> = DB::fetch(&mut conn, &*self.sql, list)
            .await
            .map_err(|err| self.error(err))?;
        Ok(rows
            .into_iter()
            .map(|row| IncomingDeadLetter {
                handler: row.handler,
                message_id: row.message_id,
                reason: row.reason,
                deliveries: u32::try_from(row.deliveries).unwrap_or(u32::MAX),
                at: crate::unix_ms::time(row.at_ms),
            })
            .collect())
    }

    /// How many incoming dead letters are recorded.
    pub async fn dead_count(&self, pool: &sqlx::Pool<DB>) -> Result<u64, Error> {
        let mut conn = pool.acquire().await?;
        let count = Plain::reading(|sql: &InboxSql| &sql.dead_count, ());
        let (count,): (i64,) = DB::fetch_one(&mut conn, &*self.sql, count)
            .await
            .map_err(|err| self.error(err))?;
        Ok(u64::try_from(count).unwrap_or(0))
    }
}
