//! MySQL and MariaDB: a plain `INSERT` whose duplicate-key error is the answer.
//!
//! The tempting equivalents are both wrong. `INSERT IGNORE` also turns unrelated errors (a value
//! too long for its column, say) into warnings and a "fresh" claim. `ON DUPLICATE KEY UPDATE`
//! with a no-op update reports 1 row for a duplicate when the client sets `CLIENT_FOUND_ROWS`, as
//! sqlx does, so every duplicate would look fresh. A plain `INSERT` either inserts (fresh) or fails
//! with `ER_DUP_ENTRY`, which InnoDB rolls back alone, leaving the caller's transaction intact;
//! every other error still reaches the caller.

use sqlx::MySql;
use sqlx::error::DatabaseError;
use sqlx::mysql::{MySqlConnection, MySqlDatabaseError};

use super::inbox::{Defer, DeferralsRow, deferrals};
use super::sealed::Statements;
use super::statement::Plain;
use super::table::run_ddl;
use super::{Codec, InboxSql};

const ER_DUP_ENTRY: u16 = 1062;
const ER_LOCK_WAIT_TIMEOUT: u16 = 1205;
const ER_LOCK_DEADLOCK: u16 = 1213;
const ER_NO_SUCH_TABLE: u16 = 1146;
const ER_DUP_FIELDNAME: u16 = 1060;

pub(super) fn is_retryable(err: &dyn DatabaseError) -> Option<bool> {
    let err = err.try_downcast_ref::<MySqlDatabaseError>()?;
    Some(matches!(
        err.number(),
        ER_LOCK_DEADLOCK | ER_LOCK_WAIT_TIMEOUT
    ))
}

fn error_number(err: &sqlx::Error) -> Option<u16> {
    err.as_database_error()?
        .try_downcast_ref::<MySqlDatabaseError>()
        .map(MySqlDatabaseError::number)
}

/// A plain INSERT's answer: `true` when it inserted, `false` on `ER_DUP_ENTRY` (which InnoDB
/// rolls back alone, leaving the caller's transaction intact), any other error as it is.
fn inserted_unless_duplicate<T>(result: Result<T, sqlx::Error>) -> Result<bool, sqlx::Error> {
    match result {
        Ok(_) => Ok(true),
        Err(err) if error_number(&err) == Some(ER_DUP_ENTRY) => Ok(false),
        Err(err) => Err(err),
    }
}

/// A lock name for a name, within the current database and MySQL's 64-character limit: lock
/// names are server-wide, and two databases that both hold a `guestlist_inbox` must not block
/// each other.
macro_rules! lock_name {
    () => {
        "CONCAT('guestlist_', LEFT(SHA2(CONCAT_WS(':', DATABASE(), ?), 256), 48))"
    };
}

/// How long a migration waits for another one to finish.
const MIGRATE_WAIT_SECS: i64 = 60;

mod keys;
mod outbox;

backend!(MySql, MySqlConnection);

impl Statements for MySql {
    const BACKEND: &'static str = "mysql";
    const INBOX_DDL: &'static str = include_str!("../../../sql/mysql/inbox.sql");
    const CLAIM: &'static str = "INSERT INTO {table} (handler, message_id) VALUES (?, ?)";
    // MySQL has no RETURNING: a batch is claimed one sorted id at a time (see claim_batch).
    const CLAIM_BATCH: &'static str = "";
    // No RETURNING: the count is read back on the same connection (see defer).
    const DEFER: &'static str = "INSERT INTO {table}_deferrals \
         (handler, message_id, deferrals, first_at) VALUES (?, ?, 1, ?) \
         ON DUPLICATE KEY UPDATE deferrals = deferrals + 1";
    const DEFERRALS: &'static str = "SELECT deferrals, first_at FROM {table}_deferrals \
         WHERE handler = ? AND message_id = ?";
    const FORGET_DEFERRALS: &'static str =
        "DELETE FROM {table}_deferrals WHERE handler = ? AND message_id = ?";
    const PURGE_BATCH: &'static str = "DELETE FROM {table} \
         WHERE {at} < UTC_TIMESTAMP(6) - INTERVAL ? SECOND ORDER BY {at} LIMIT ?";
    const COUNT_OLDER: &'static str =
        "SELECT count(*) FROM {table} WHERE {at} < UTC_TIMESTAMP(6) - INTERVAL ? SECOND";
    // InnoDB's figures are its statistics' estimates. InnoDB keeps no count of dead rows (its
    // purge thread removes deleted rows itself); data_free is the tablespace's free space.
    const TABLE_SIZE: &'static str = "SELECT CAST(data_length AS SIGNED), \
         CAST(index_length AS SIGNED), CAST(NULL AS SIGNED), CAST(data_free AS SIGNED) \
         FROM information_schema.tables \
         WHERE table_schema = DATABASE() AND table_name = '{table}'";
    const RECORD_DEAD: &'static str = "INSERT INTO {table}_dead (handler, message_id, reason, \
         deliveries, dead_at, topic, msg_key, headers, body) \
         VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?) \
         ON DUPLICATE KEY UPDATE reason = VALUES(reason), deliveries = VALUES(deliveries), \
         dead_at = VALUES(dead_at), topic = VALUES(topic), msg_key = VALUES(msg_key), \
         headers = VALUES(headers), body = VALUES(body), state = 'dead'";
    const INBOX_HANDLERS: &'static str = "SELECT CAST(handler AS CHAR), COUNT(*), \
         CAST(TIMESTAMPDIFF(MICROSECOND, MIN(seen_at), UTC_TIMESTAMP(6)) DIV 1000 AS SIGNED) \
         FROM {table} GROUP BY handler ORDER BY handler";

    fn inserted(changed: Result<u64, sqlx::Error>) -> Result<bool, sqlx::Error> {
        inserted_unless_duplicate(changed)
    }

    async fn defer<'c>(
        conn: &'c mut MySqlConnection,
        sql: &'c InboxSql,
        defer: Defer<'c>,
    ) -> Result<DeferralsRow, sqlx::Error> {
        let (handler, id, now_ms) = (defer.handler, defer.id, defer.now_ms);
        Self::run(&mut *conn, sql, defer).await?;
        // Two consumers deferring the message at once each count one; both then read the sum.
        let read = Plain::reading(deferrals, (handler, id));
        let deferrals = Self::fetch_first(conn, sql, read);
        let deferrals: Option<DeferralsRow> = deferrals.await?;
        Ok(deferrals.unwrap_or_else(|| DeferralsRow::first(now_ms)))
    }

    async fn claim_batch<'c>(
        conn: &'c mut MySqlConnection,
        sql: &'c InboxSql,
        handler: &'c str,
        ids: &'c [&'c str],
    ) -> Result<Vec<String>, sqlx::Error> {
        // A multi-row INSERT cannot say which rows were new without INSERT IGNORE or RETURNING
        // (MariaDB only); one prepared INSERT per id, in sorted order, keeps both traps shut.
        let mut fresh = Vec::new();
        for id in ids {
            if Self::claim(&mut *conn, sql, handler, id).await? {
                fresh.push((*id).to_owned());
            }
        }
        Ok(fresh)
    }

    async fn migrate<'c>(
        conn: &'c mut MySqlConnection,
        lock: &'c str,
        ddl: &'c [String],
    ) -> Result<(), sqlx::Error> {
        // DDL commits implicitly in MySQL: a session lock, not a transaction, makes migrators
        // take turns.
        let taken: Option<i64> =
            sqlx::query_scalar(concat!("SELECT GET_LOCK(", lock_name!(), ", ?)"))
                .bind(lock)
                .bind(MIGRATE_WAIT_SECS)
                .fetch_one(&mut *conn)
                .await?;
        if taken != Some(1) {
            return Err(sqlx::Error::Protocol(format!(
                "another migration held the lock {lock} for {MIGRATE_WAIT_SECS}s; run the migration again"
            )));
        }
        let result = run_ddl::<MySql>(&mut *conn, ddl, |err| {
            error_number(err) == Some(ER_DUP_FIELDNAME)
        })
        .await;
        Self::unlock(conn, lock).await?;
        result
    }

    async fn try_lock<'c>(
        conn: &'c mut MySqlConnection,
        name: &'c str,
    ) -> Result<bool, sqlx::Error> {
        let taken: Option<i64> =
            sqlx::query_scalar(concat!("SELECT GET_LOCK(", lock_name!(), ", 0)"))
                .bind(name)
                .fetch_one(conn)
                .await?;
        Ok(taken == Some(1))
    }

    async fn unlock<'c>(conn: &'c mut MySqlConnection, name: &'c str) -> Result<(), sqlx::Error> {
        sqlx::query(concat!("SELECT RELEASE_LOCK(", lock_name!(), ")"))
            .bind(name)
            .execute(conn)
            .await?;
        Ok(())
    }

    fn is_missing_table(err: &sqlx::Error) -> bool {
        error_number(err) == Some(ER_NO_SUCH_TABLE)
    }
}

impl crate::backend::history::HistoryStatements for MySql {
    // The times are UTC DATETIMEs: the difference from the epoch's needs no time zone.
    const EPOCH_MS: &'static str = "CAST(TIMESTAMPDIFF(MICROSECOND, '1970-01-01 00:00:00', {at}) \
         DIV 1000 AS SIGNED)";
    const AGE_MS: &'static str =
        "CAST(TIMESTAMPDIFF(MICROSECOND, {at}, UTC_TIMESTAMP(6)) DIV 1000 AS SIGNED)";
    const NUMBERED: bool = false;
    const DIV: &'static str = "DIV";
    const AGO: &'static str = "UTC_TIMESTAMP(6) - INTERVAL {secs} SECOND";
}

impl crate::backend::steps::StepsStatements for MySql {
    // The difference from the epoch's UTC time needs no time zone.
    const NOW_MS: &'static str = "CAST(TIMESTAMPDIFF(MICROSECOND, '1970-01-01 00:00:00', \
         UTC_TIMESTAMP(6)) DIV 1000 AS SIGNED)";
    const NUMBERED: bool = false;
    const ON_CONFLICT: &'static str = "";
    const TEXT: &'static str = "CAST({col} AS CHAR)";
}
