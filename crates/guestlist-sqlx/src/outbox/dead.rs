//! The outgoing dead letters: messages a broker refused for good or too many times, kept in
//! `<table>_dead` with why, for operators to list, retry and drop.

use std::time::Duration;

use crate::Error;
use crate::backend::Backend;
use crate::outbox::Outbox;

/// A message the relay moved to the outgoing dead letters, so that its ordering key moves on.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct DeadLetter {
    /// Its row's id (the one it had in the outbox): what [`Outbox::retry_dead`] and
    /// [`Outbox::drop_dead`] take.
    pub id: i64,
    /// The message's id.
    pub message_id: String,
    /// Where it was going.
    pub topic: String,
    /// Its ordering key, if it has one.
    pub ordering_key: Option<String>,
    /// Its place among its key's messages.
    pub seq: i64,
    /// Why it was moved: the broker's refusal and what to do about it.
    pub reason: String,
    /// How long ago it was moved.
    pub age: Duration,
    /// The size of its body; the body itself stays in the table, never in logs.
    pub payload_bytes: u64,
}

impl<DB: Backend> Outbox<DB> {
    /// The oldest `limit` outgoing dead letters.
    ///
    /// A message lands there when its broker can never take it (too large, an id or ordering
    /// key it cannot carry: [`Publish::check`](crate::Publish::check)) or refused it
    /// [`Relay::max_attempts`](crate::Relay::max_attempts) times (no queue or stream takes
    /// its topic). Fix the cause, then [`retry_dead`](Self::retry_dead) it, or
    /// [`drop_dead`](Self::drop_dead) it.
    pub async fn dead_letters(
        &self,
        pool: &sqlx::Pool<DB>,
        limit: u32,
    ) -> Result<Vec<DeadLetter>, Error> {
        let mut conn = pool.acquire().await?;
        let rows = DB::dead_list(&mut conn, &self.relay, i64::from(limit))
            .await
            .map_err(|err| self.dead_error(err))?;
        Ok(rows
            .into_iter()
            .map(|row| DeadLetter {
                id: row.id,
                message_id: row.message_id,
                topic: row.topic,
                ordering_key: row.ordering_key,
                seq: row.seq,
                reason: row.reason,
                age: Duration::from_millis(row.age_ms.unwrap_or(0).max(0).unsigned_abs()),
                payload_bytes: row.bytes.max(0).unsigned_abs(),
            })
            .collect())
    }

    /// Puts the dead letter `id` back in the outbox, to be published after what is pending
    /// now (with its id, ordering key and place as they were), and removes it from the dead
    /// letters: `false` when there is no such dead letter.
    pub async fn retry_dead(&self, pool: &sqlx::Pool<DB>, id: i64) -> Result<bool, Error> {
        let mut conn = pool.acquire().await?;
        DB::dead_retry(&mut conn, &self.relay, id)
            .await
            .map_err(|err| self.dead_error(err))
    }

    /// Deletes the dead letter `id` for good: `false` when there is none.
    pub async fn drop_dead(&self, pool: &sqlx::Pool<DB>, id: i64) -> Result<bool, Error> {
        let mut conn = pool.acquire().await?;
        DB::dead_drop(&mut conn, &self.relay, id)
            .await
            .map_err(|err| self.dead_error(err))
    }

    /// How many outgoing dead letters there are.
    pub async fn dead_count(&self, pool: &sqlx::Pool<DB>) -> Result<u64, Error> {
        let mut conn = pool.acquire().await?;
        let count = DB::dead_count(&mut conn, &self.relay)
            .await
            .map_err(|err| self.dead_error(err))?;
        Ok(count.max(0).unsigned_abs())
    }

    pub(crate) fn dead_error(&self, err: sqlx::Error) -> Error {
        let table = crate::TableName::new(format!("{}_dead", self.table()))
            .unwrap_or_else(|_| self.table().clone());
        Error::from_store::<DB>(&table, err)
    }
}
