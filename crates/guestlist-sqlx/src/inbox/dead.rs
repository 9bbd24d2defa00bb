//! Incoming dead letters: the messages a consumer moved to its broker's dead-letter place
//! (poison: failed too often, or deferred past its limit), recorded in `<inbox table>_dead`
//! (created by [`Inbox::migrate`]) with a copy of the message (up to [`KEPT_BODY_BYTES`]), so
//! that an operator sees them beside the guest list (`guestlist console`, `guestlist history`,
//! `guestlist inbox dead`), grouped by failure, and retries them from there
//! ([`Inbox::retry_dead`]) or drops them.

use std::time::{Duration, SystemTime};

use guestlist_core::{HandlerName, MessageId};

use crate::backend::inbox_dead::{DeadRow, DeadSql, DeadWholeRow, RecordDead};
use crate::backend::statement::Plain;
use crate::{Backend, Error, Inbox};

/// The largest body kept with a dead letter; a larger one is recorded without it, and is
/// retried with the broker's own tools from its dead-letter place.
pub const KEPT_BODY_BYTES: usize = 4 * 1024 * 1024;

/// Where a dead letter stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum DeadState {
    /// Given up on, waiting for an operator.
    Dead,
    /// Being put back: published, or about to be, and not yet confirmed by the broker. A retry
    /// whose process died here is finished by the next [`Inbox::retry_dead`] of it.
    Retrying,
    /// Put back, and confirmed by the broker. Dead-lettered again, it is [`DeadState::Dead`].
    Retried,
}

impl DeadState {
    fn parse(text: &str) -> Self {
        match text {
            "retrying" => Self::Retrying,
            "retried" => Self::Retried,
            _ => Self::Dead,
        }
    }

    /// The state's name: `dead`, `retrying` or `retried`.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Dead => "dead",
            Self::Retrying => "retrying",
            Self::Retried => "retried",
        }
    }
}

/// What a consumer keeps of a message it dead-letters, for a retry: where it goes back to, its
/// broker key, its headers and its body.
#[derive(Debug, Clone, Copy)]
pub struct DeadCopy<'a> {
    /// Where a retry is published to reach the handler's source again: a NATS subject, a
    /// RabbitMQ queue (through the default exchange), a Kafka topic, an SQS queue's URL.
    /// `None` where the broker did not say: such a dead letter cannot be retried from here.
    pub topic: Option<&'a str>,
    /// The broker's key of the message (a Kafka record's key, an SQS FIFO group id).
    pub key: Option<&'a str>,
    /// Its headers, as the handler saw them.
    pub headers: &'a [(String, String)],
    /// Its body, exactly as received.
    pub body: &'a [u8],
}

/// A message a consumer's handler dead-lettered, as recorded.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct IncomingDeadLetter {
    /// The handler that gave up on it.
    pub handler: String,
    /// The id its inbox claims it under.
    pub message_id: String,
    /// Why.
    pub reason: String,
    /// The broker's delivery count when it was dead-lettered.
    pub deliveries: u32,
    /// When (the consumer's clock).
    pub at: SystemTime,
    /// Where a retry goes (see [`DeadCopy::topic`]).
    pub topic: Option<String>,
    /// The broker's key of the message.
    pub key: Option<String>,
    /// Dead, being retried, or retried.
    pub state: DeadState,
    /// How many times it was retried.
    pub retries: u32,
    /// When it was last retried.
    pub retried_at: Option<SystemTime>,
    /// Who retried it last (a console session, an operator at the command line).
    pub retried_by: Option<String>,
    /// The kept body's size; `None` where no copy was kept (too large, or recorded before
    /// copies were kept).
    pub body_bytes: Option<u64>,
    /// The body's first bytes (up to 256), to look at before a retry.
    pub preview: Vec<u8>,
    /// Its headers ([`Inbox::dead_letter`] only; empty in a list).
    pub headers: Vec<(String, String)>,
    /// Its whole body ([`Inbox::dead_letter`] only).
    pub body: Option<Vec<u8>>,
}

impl IncomingDeadLetter {
    /// The class of its reason ([`guestlist_core::failure_class`]).
    pub fn class(&self) -> String {
        guestlist_core::failure_class(&self.reason)
    }

    /// The name of its failure group: its handler and its reason's class.
    pub fn group(&self) -> String {
        guestlist_core::failure_group(&self.handler, &self.class())
    }

    fn from_row(row: DeadRow) -> Self {
        let count = |n: i64| u32::try_from(n).unwrap_or(u32::MAX);
        Self {
            handler: row.handler,
            message_id: row.message_id,
            reason: row.reason,
            deliveries: count(row.deliveries),
            at: crate::unix_ms::time(row.at_ms),
            topic: row.topic,
            key: row.key,
            state: DeadState::parse(&row.state),
            retries: count(row.retries),
            retried_at: row.retried_ms.map(crate::unix_ms::time),
            retried_by: row.retried_by,
            body_bytes: u64::try_from(row.body_bytes).ok(),
            preview: row.preview.unwrap_or_default(),
            headers: Vec::new(),
            body: None,
        }
    }

    fn from_whole(row: DeadWholeRow) -> Self {
        let listed = DeadRow {
            handler: row.handler,
            message_id: row.message_id,
            reason: row.reason,
            deliveries: row.deliveries,
            at_ms: row.at_ms,
            topic: row.topic,
            key: row.key,
            state: row.state,
            retries: row.retries,
            retried_ms: row.retried_ms,
            retried_by: row.retried_by,
            body_bytes: row.body_bytes,
            preview: row.preview,
        };
        Self {
            headers: guestlist_core::OutboxMessage::decode_headers(row.headers.as_deref()),
            body: row.body,
            ..Self::from_row(listed)
        }
    }
}

impl<DB: Backend> Inbox<DB> {
    /// Records that `handler` moved message `id` to the broker's dead-letter place after
    /// `deliveries` deliveries, for `reason`, with `copy` kept for a retry (its body only up to
    /// [`KEPT_BODY_BYTES`]); a message dead-lettered again replaces its record and is dead
    /// again. The consumer runtime records each one it dead-letters.
    pub async fn record_dead(
        &self,
        pool: &sqlx::Pool<DB>,
        handler: &HandlerName,
        id: &MessageId,
        reason: &str,
        deliveries: u32,
        copy: DeadCopy<'_>,
    ) -> Result<(), Error> {
        let headers = guestlist_core::header_lines::encode(
            copy.headers.iter().map(|(n, v)| (n.as_str(), v.as_bytes())),
        );
        let kept = copy.body.len() <= KEPT_BODY_BYTES;
        let mut conn = pool.acquire().await?;
        let record = RecordDead {
            handler: handler.as_str(),
            id: id.as_str(),
            reason,
            deliveries: i64::from(deliveries),
            at_ms: crate::unix_ms::now(),
            topic: copy.topic,
            key: copy.key,
            headers: Some(&headers),
            body: kept.then_some(copy.body),
        };
        DB::run(&mut conn, &*self.dead, record)
            .await
            .map(drop)
            .map_err(|err| self.dead_error(err))
    }

    /// The incoming dead letters recorded, the newest first, `limit` at most (retried ones
    /// included, with their state).
    pub async fn dead_letters(
        &self,
        pool: &sqlx::Pool<DB>,
        limit: u32,
    ) -> Result<Vec<IncomingDeadLetter>, Error> {
        let mut conn = pool.acquire().await?;
        let list = Plain::reading(|sql: &DeadSql| &sql.list, (i64::from(limit),));
        let rows: Vec<DeadRow> = DB::fetch(&mut conn, &*self.dead, list)
            .await
            .map_err(|err| self.dead_error(err))?;
        Ok(rows.into_iter().map(IncomingDeadLetter::from_row).collect())
    }

    /// The dead letter `id` of `handler`, whole (headers and body), if there is one.
    pub async fn dead_letter(
        &self,
        pool: &sqlx::Pool<DB>,
        handler: &str,
        id: &str,
    ) -> Result<Option<IncomingDeadLetter>, Error> {
        let mut conn = pool.acquire().await?;
        let one = Plain::reading(|sql: &DeadSql| &sql.one, (handler, id));
        let rows: Vec<DeadWholeRow> = DB::fetch(&mut conn, &*self.dead, one)
            .await
            .map_err(|err| self.dead_error(err))?;
        Ok(rows.into_iter().next().map(IncomingDeadLetter::from_whole))
    }

    /// Deletes the dead letter `id` of `handler` for good (its copy in the broker's dead-letter
    /// place stays): `false` when there is none.
    pub async fn drop_dead(
        &self,
        pool: &sqlx::Pool<DB>,
        handler: &str,
        id: &str,
    ) -> Result<bool, Error> {
        let mut conn = pool.acquire().await?;
        let drop = Plain::new(|sql: &DeadSql| &sql.drop, (handler, id));
        let dropped = DB::run(&mut conn, &*self.dead, drop)
            .await
            .map_err(|err| self.dead_error(err))?;
        Ok(dropped == 1)
    }

    /// How many incoming dead letters are dead or being retried (retried ones not counted).
    pub async fn dead_count(&self, pool: &sqlx::Pool<DB>) -> Result<u64, Error> {
        let mut conn = pool.acquire().await?;
        let count = Plain::reading(|sql: &DeadSql| &sql.count, ());
        let (count,): (i64,) = DB::fetch_one(&mut conn, &*self.dead, count)
            .await
            .map_err(|err| self.dead_error(err))?;
        Ok(u64::try_from(count).unwrap_or(0))
    }

    /// Deletes the dead letters recorded longer ago than `older_than` (those being retried
    /// stay), and says how many went: their own retention, apart from the guest list's.
    pub async fn purge_dead(
        &self,
        pool: &sqlx::Pool<DB>,
        older_than: Duration,
    ) -> Result<u64, Error> {
        let cutoff = crate::unix_ms::now()
            .saturating_sub(i64::try_from(older_than.as_millis()).unwrap_or(i64::MAX));
        let mut conn = pool.acquire().await?;
        let purge = Plain::new(|sql: &DeadSql| &sql.purge, (cutoff,));
        DB::run(&mut conn, &*self.dead, purge)
            .await
            .map_err(|err| self.dead_error(err))
    }

    pub(crate) fn dead_error(&self, err: sqlx::Error) -> Error {
        let table = crate::TableName::new(format!("{}_dead", self.table()))
            .unwrap_or_else(|_| self.table().clone());
        Error::from_store::<DB>(&table, err)
    }
}
