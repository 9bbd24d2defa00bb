//! PostgreSQL: `ON CONFLICT DO NOTHING`, a batch through `unnest`, advisory locks.

use sqlx::error::DatabaseError;
use sqlx::postgres::{PgConnection, PgDatabaseError};
use sqlx::{AssertSqlSafe, Postgres};

use super::InboxSql;
use super::sealed::Statements;

/// SQLSTATEs after which the whole transaction may be run again.
const SERIALIZATION_FAILURE: &str = "40001";
const DEADLOCK_DETECTED: &str = "40P01";
const UNDEFINED_TABLE: &str = "42P01";

pub(super) fn is_retryable(err: &dyn DatabaseError) -> Option<bool> {
    let err = err.try_downcast_ref::<PgDatabaseError>()?;
    Some(matches!(
        err.code(),
        SERIALIZATION_FAILURE | DEADLOCK_DETECTED
    ))
}

/// A stable 64-bit advisory lock key for `name`.
fn lock_key(name: &str) -> i64 {
    use sha2::{Digest, Sha256};
    let digest = Sha256::digest(name.as_bytes());
    i64::from_be_bytes(
        digest[..8]
            .try_into()
            .expect("a SHA-256 digest has 32 bytes"),
    )
}

impl Statements for Postgres {
    const BACKEND: &'static str = "postgres";
    const DDL: &'static str = include_str!("../../sql/postgres.sql");
    // Never catch a unique violation here: on PostgreSQL it aborts the caller's transaction.
    const CLAIM: &'static str =
        "INSERT INTO {table} (handler, message_id) VALUES ($1, $2) ON CONFLICT DO NOTHING";
    // unnest keeps the array's (sorted) order, so overlapping batches lock rows in one order.
    const CLAIM_BATCH: &'static str = "INSERT INTO {table} (handler, message_id) \
         SELECT $1, id FROM unnest($2::text[]) AS batch(id) \
         ON CONFLICT DO NOTHING RETURNING message_id";
    // SKIP LOCKED: rows another purger holds are left to it instead of waited for.
    const PURGE_BATCH: &'static str = "DELETE FROM {table} WHERE (handler, message_id) IN ( \
         SELECT handler, message_id FROM {table} \
         WHERE seen_at < now() - make_interval(secs => $1::bigint) \
         ORDER BY seen_at LIMIT $2 FOR UPDATE SKIP LOCKED)";
    const COUNT_OLDER: &'static str =
        "SELECT count(*) FROM {table} WHERE seen_at < now() - make_interval(secs => $1::bigint)";

    super::same_everywhere!(PgConnection);
    super::claim_by_rows_affected!(PgConnection);

    async fn claim_batch<'c>(
        conn: &'c mut PgConnection,
        sql: &'c InboxSql,
        handler: &'c str,
        ids: &'c [&'c str],
    ) -> Result<Vec<String>, sqlx::Error> {
        sqlx::query_scalar(AssertSqlSafe(sql.claim_batch.clone()))
            .bind(handler)
            .bind(ids)
            .fetch_all(conn)
            .await
    }

    async fn migrate<'c>(conn: &'c mut PgConnection, sql: &'c InboxSql) -> Result<(), sqlx::Error> {
        use sqlx::Connection;
        // Concurrent CREATE TABLE IF NOT EXISTS can still collide in the catalog: take turns.
        let mut tx = conn.begin().await?;
        sqlx::query("SELECT pg_advisory_xact_lock($1)")
            .bind(lock_key(&format!("guestlist:migrate:{}", sql.table)))
            .execute(&mut *tx)
            .await?;
        for statement in &sql.ddl {
            sqlx::query(AssertSqlSafe(statement.as_str()))
                .execute(&mut *tx)
                .await?;
        }
        tx.commit().await
    }

    async fn try_lock<'c>(conn: &'c mut PgConnection, name: &'c str) -> Result<bool, sqlx::Error> {
        sqlx::query_scalar("SELECT pg_try_advisory_lock($1)")
            .bind(lock_key(name))
            .fetch_one(conn)
            .await
    }

    async fn unlock<'c>(conn: &'c mut PgConnection, name: &'c str) -> Result<(), sqlx::Error> {
        sqlx::query("SELECT pg_advisory_unlock($1)")
            .bind(lock_key(name))
            .execute(conn)
            .await?;
        Ok(())
    }

    fn is_missing_table(err: &sqlx::Error) -> bool {
        err.as_database_error()
            .and_then(|e| e.try_downcast_ref::<PgDatabaseError>())
            .is_some_and(|e| e.code() == UNDEFINED_TABLE)
    }
}
