//! MySQL and MariaDB: a plain `INSERT` whose duplicate-key error is the answer.
//!
//! The tempting equivalents are both wrong. `INSERT IGNORE` also turns unrelated errors (a value
//! too long for its column, say) into warnings and a "fresh" claim. `ON DUPLICATE KEY UPDATE`
//! with a no-op update reports 1 row for a duplicate when the client sets `CLIENT_FOUND_ROWS`, as
//! sqlx does, so every duplicate would look fresh. A plain `INSERT` either inserts (fresh) or fails
//! with `ER_DUP_ENTRY`, which InnoDB rolls back alone, leaving the caller's transaction intact;
//! every other error still reaches the caller.

use sqlx::error::DatabaseError;
use sqlx::mysql::{MySqlConnection, MySqlDatabaseError};
use sqlx::{AssertSqlSafe, MySql};

use super::InboxSql;
use super::sealed::Statements;

const ER_DUP_ENTRY: u16 = 1062;
const ER_LOCK_WAIT_TIMEOUT: u16 = 1205;
const ER_LOCK_DEADLOCK: u16 = 1213;
const ER_NO_SUCH_TABLE: u16 = 1146;

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

/// A lock name within MySQL's 64-character limit.
fn lock_name(name: &str) -> &str {
    &name[..name.len().min(64)]
}

impl Statements for MySql {
    const BACKEND: &'static str = "mysql";
    const DDL: &'static str = include_str!("../../sql/mysql.sql");
    const CLAIM: &'static str = "INSERT INTO {table} (handler, message_id) VALUES (?, ?)";
    // MySQL has no RETURNING: a batch is claimed one sorted id at a time (see claim_batch).
    const CLAIM_BATCH: &'static str = "";
    const PURGE_BATCH: &'static str = "DELETE FROM {table} \
         WHERE seen_at < UTC_TIMESTAMP(6) - INTERVAL ? SECOND ORDER BY seen_at LIMIT ?";
    const COUNT_OLDER: &'static str =
        "SELECT count(*) FROM {table} WHERE seen_at < UTC_TIMESTAMP(6) - INTERVAL ? SECOND";

    super::same_everywhere!(MySqlConnection);

    async fn claim<'c>(
        conn: &'c mut MySqlConnection,
        sql: &'c InboxSql,
        handler: &'c str,
        id: &'c str,
    ) -> Result<bool, sqlx::Error> {
        let inserted = sqlx::query(AssertSqlSafe(sql.claim.clone()))
            .bind(handler)
            .bind(id)
            .execute(conn)
            .await;
        match inserted {
            Ok(_) => Ok(true),
            Err(err) if error_number(&err) == Some(ER_DUP_ENTRY) => Ok(false),
            Err(err) => Err(err),
        }
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
        sql: &'c InboxSql,
    ) -> Result<(), sqlx::Error> {
        // DDL commits implicitly in MySQL: a session lock, not a transaction, makes migrators
        // take turns.
        let name = format!("guestlist_migrate_{}", sql.table);
        sqlx::query("SELECT GET_LOCK(?, 60)")
            .bind(lock_name(&name))
            .execute(&mut *conn)
            .await?;
        let mut result = Ok(());
        for statement in &sql.ddl {
            result = sqlx::query(AssertSqlSafe(statement.as_str()))
                .execute(&mut *conn)
                .await
                .map(drop);
            if result.is_err() {
                break;
            }
        }
        Self::unlock(conn, &name).await?;
        result
    }

    async fn try_lock<'c>(
        conn: &'c mut MySqlConnection,
        name: &'c str,
    ) -> Result<bool, sqlx::Error> {
        let taken: Option<i64> = sqlx::query_scalar("SELECT GET_LOCK(?, 0)")
            .bind(lock_name(name))
            .fetch_one(conn)
            .await?;
        Ok(taken == Some(1))
    }

    async fn unlock<'c>(conn: &'c mut MySqlConnection, name: &'c str) -> Result<(), sqlx::Error> {
        sqlx::query("SELECT RELEASE_LOCK(?)")
            .bind(lock_name(name))
            .execute(conn)
            .await?;
        Ok(())
    }

    fn is_missing_table(err: &sqlx::Error) -> bool {
        error_number(err) == Some(ER_NO_SUCH_TABLE)
    }
}
