//! Deferrals: messages a handler could not handle *yet*, counted apart from failures.
//!
//! A handler that says "not yet" (a downstream service has the work in flight, is rate-limited,
//! or is restarting) hands its message back without counting toward poison. The broker's
//! delivery count cannot tell the two apart, and two consumers (or a restarted one) each see only
//! some of the deliveries, so the deferrals of a message are counted in the database, in
//! `<inbox table>_deferrals`, created by [`Inbox::migrate`].
//!
//! The table counts every delivery that must not count against its message: its deferrals,
//! and its withdrawals ([`Inbox::withdrawn`]: an SQS FIFO message handed back because an
//! earlier message of its group was, which SQS counts as a receive all the same).

use std::time::{Duration, SystemTime};

use guestlist_core::{HandlerName, MessageId};

use crate::backend::InboxSql;
use crate::backend::inbox::{Defer, DeferralsRow, deferrals};
use crate::backend::statement::Plain;
use crate::{Backend, Error, Inbox};

/// How often a message has been deferred (or withdrawn because of another message), and since
/// when.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Deferrals {
    /// Deferrals (and withdrawals) counted so far.
    pub count: u32,
    /// When the first was counted.
    pub since: SystemTime,
}

impl Deferrals {
    /// How long ago the first deferral was counted.
    pub fn age(&self) -> Duration {
        SystemTime::now()
            .duration_since(self.since)
            .unwrap_or_default()
    }

    fn from_row(row: DeferralsRow) -> Self {
        Self {
            count: u32::try_from(row.count).unwrap_or(u32::MAX),
            since: crate::unix_ms::time(row.first_ms),
        }
    }
}

impl<DB: Backend> Inbox<DB> {
    /// Counts one deferral of message `id` for `handler`, in a statement of its own (outside any
    /// rolled-back work), and returns the count with the time of the first.
    pub async fn defer(
        &self,
        pool: &sqlx::Pool<DB>,
        handler: &HandlerName,
        id: &MessageId,
    ) -> Result<Deferrals, Error> {
        let now_ms = crate::unix_ms::now();
        let mut conn = pool.acquire().await?;
        let defer = Defer {
            handler: handler.as_str(),
            id: id.as_str(),
            now_ms,
        };
        let row = DB::defer(&mut conn, &self.sql, defer)
            .await
            .map_err(|err| self.error(err))?;
        Ok(Deferrals::from_row(row))
    }

    /// Counts one delivery of message `id` for `handler` that was withdrawn because of another
    /// message (an earlier message of its SQS FIFO group was handed back, and took it back
    /// too): uncounted against the message, as a deferral is. Returns the count with the time
    /// of the first, deferrals included.
    pub async fn withdrawn(
        &self,
        pool: &sqlx::Pool<DB>,
        handler: &HandlerName,
        id: &MessageId,
    ) -> Result<Deferrals, Error> {
        // The same row as a deferral's: both are deliveries that do not count against it.
        self.defer(pool, handler, id).await
    }

    /// The deferrals (and withdrawals) counted for message `id` and `handler`, if any.
    pub async fn deferrals(
        &self,
        pool: &sqlx::Pool<DB>,
        handler: &HandlerName,
        id: &MessageId,
    ) -> Result<Option<Deferrals>, Error> {
        let mut conn = pool.acquire().await?;
        let read = Plain::reading(deferrals, (handler.as_str(), id.as_str()));
        let row = DB::fetch_first(&mut conn, &*self.sql, read)
            .await
            .map_err(|err| self.error(err))?;
        Ok(row.map(Deferrals::from_row))
    }

    /// Forgets the deferrals of message `id` for `handler`, once it is handled or dead-lettered.
    pub async fn forget_deferrals(
        &self,
        pool: &sqlx::Pool<DB>,
        handler: &HandlerName,
        id: &MessageId,
    ) -> Result<(), Error> {
        let mut conn = pool.acquire().await?;
        let forget = Plain::new(
            |sql: &InboxSql| &sql.forget_deferrals,
            (handler.as_str(), id.as_str()),
        );
        DB::run(&mut conn, &*self.sql, forget)
            .await
            .map(drop)
            .map_err(|err| self.error(err))
    }
}
