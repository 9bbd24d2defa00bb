//! The outgoing dead letters, for operators: listed, counted, put back in the outbox, dropped.

use std::future::Future;
use std::sync::Arc;

use sqlx::Connection;

use super::RelaySql;
use crate::backend::sealed::OutboxStatements;
use crate::backend::statement::{Codec, Plain, row};

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

/// A dead letter's headers (as stored, if any) and body.
#[allow(unreachable_pub)] // named by the sealed traits, unreachable outside the crate
pub type StoredMessage = (Option<Vec<u8>>, Vec<u8>);

/// An edit of a dead letter: its headers as stored and its body in, the new ones out.
#[allow(unreachable_pub)] // named by the sealed traits, unreachable outside the crate
pub type Rewrite<'a> = dyn Fn(Option<&[u8]>, Vec<u8>) -> (Vec<u8>, Vec<u8>) + Sync + 'a;

/// The dead letters' statements. Sealed: implemented here for the three backends.
#[allow(unreachable_pub)]
pub trait DeadStatements: OutboxStatements {
    /// Template of [`RelaySql::dead_list`]: id, message id, topic, ordering key, seq, reason,
    /// age (ms), body bytes.
    const DEAD_LIST: &'static str;
    /// Template of [`RelaySql::dead_retry`].
    const DEAD_RETRY: &'static str;
    /// Template of [`RelaySql::dead_drop`].
    const DEAD_DROP: &'static str = "DELETE FROM {table}_dead WHERE id = $1";
    /// Template of [`RelaySql::dead_count`].
    const DEAD_COUNT: &'static str = "SELECT COUNT(*) FROM {table}_dead";
    /// Template of [`RelaySql::dead_read`].
    const DEAD_READ: &'static str = "SELECT headers, payload FROM {table}_dead WHERE id = $1";
    /// Template of [`RelaySql::dead_edit`].
    const DEAD_EDIT: &'static str =
        "UPDATE {table}_dead SET headers = $1, payload = $2 WHERE id = $3";

    /// The headers and body of the dead letter `id`, if there is one.
    fn dead_read<'c>(
        conn: &'c mut Self::Connection,
        sql: &'c RelaySql,
        id: i64,
    ) -> impl Future<Output = Result<Option<StoredMessage>, sqlx::Error>> + Send + 'c {
        let read = Self::fetch(
            conn,
            sql,
            Plain::reading(|sql: &RelaySql| &sql.dead_read, (id,)),
        );
        async move { Ok(read.await?.into_iter().next()) }
    }

    /// Rewrites the dead letter `id` by `edit` (its headers as stored and its body in, the new
    /// ones out), then puts it back in the outbox and deletes it, on one transaction: `false`
    /// when there is no such dead letter.
    fn dead_retry_edited<'c>(
        conn: &'c mut Self::Connection,
        sql: &'c RelaySql,
        id: i64,
        edit: &'c Rewrite<'c>,
    ) -> impl Future<Output = Result<bool, sqlx::Error>> + Send + 'c {
        async move {
            let mut tx = conn.begin().await?;
            let read = Plain::reading(|sql: &RelaySql| &sql.dead_read, (id,));
            let rows: Vec<StoredMessage> = Self::fetch(&mut tx, sql, read).await?;
            let Some((headers, payload)) = rows.into_iter().next() else {
                return Ok(false);
            };
            let (headers, payload) = edit(headers.as_deref(), payload);
            let rewrite = Plain::new(
                |sql: &RelaySql| &sql.dead_edit,
                (&headers[..], &payload[..], id),
            );
            Self::run(&mut tx, sql, rewrite).await?;
            let retry = Plain::new(|sql: &RelaySql| &sql.dead_retry, (id,));
            Self::run(&mut tx, sql, retry).await?;
            Self::run(&mut tx, sql, Plain::new(dead_drop, (id,))).await?;
            tx.commit().await?;
            Ok(true)
        }
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
        retry_in_transaction::<Self>(conn, sql, id)
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
}

/// A dead letter's deletion: its id.
fn dead_drop(sql: &RelaySql) -> &Arc<str> {
    &sql.dead_drop
}

/// Puts the dead letter `id` back in the outbox and deletes it, on one transaction: `false`
/// when there is no such dead letter.
async fn retry_in_transaction<DB: Codec>(
    conn: &mut DB::Connection,
    sql: &RelaySql,
    id: i64,
) -> Result<bool, sqlx::Error> {
    let mut tx = conn.begin().await?;
    let retry = Plain::new(|sql: &RelaySql| &sql.dead_retry, (id,));
    if DB::run(&mut tx, sql, retry).await? == 0 {
        return Ok(false);
    }
    DB::run(&mut tx, sql, Plain::new(dead_drop, (id,))).await?;
    tx.commit().await?;
    Ok(true)
}
