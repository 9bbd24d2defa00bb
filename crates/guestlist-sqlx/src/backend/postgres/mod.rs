//! PostgreSQL: `ON CONFLICT DO NOTHING`, a batch through `unnest`, advisory locks.

use sqlx::error::DatabaseError;
use sqlx::postgres::{PgConnection, PgDatabaseError};
use sqlx::{AssertSqlSafe, Postgres};

use super::TableSql;
use super::sealed::Statements;
use super::statement::{Bound, Columns, row};
use super::table::run_ddl;

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

/// The advisory lock key for a name, within the current schema: two schemas of one database
/// that both hold a `guestlist_inbox` do not block each other.
const LOCK_KEY: &str = "hashtextextended(current_schema() || '.' || $1, 0)";

mod keys;
mod outbox;
mod rounds;

row! {
    /// One purge batch's outcome as read: how many rows went, and the newest one's time.
    struct PurgedRow {
        deleted: i64,
        /// The newest deleted row's time in Unix microseconds, where rows went.
        newest_micros: Option<i64>,
    }
}

backend!(Postgres, PgConnection);

impl Statements for Postgres {
    const BACKEND: &'static str = "postgres";
    // A batch's deletes need not reach the disk before the next: lost in a crash, its rows are
    // purged again, and a later commit that must be durable flushes the WAL before it anyway.
    // Live commits no longer wait behind the purge's own flushes.
    const PURGE_SESSION: &'static str = "SET synchronous_commit = off";
    const INBOX_DDL: &'static str = include_str!("../../../sql/postgres/inbox.sql");
    // Never catch a unique violation here: on PostgreSQL it aborts the caller's transaction.
    const CLAIM: &'static str =
        "INSERT INTO {table} (handler, message_id) VALUES ($1, $2) ON CONFLICT DO NOTHING";
    // unnest keeps the array's (sorted) order, so overlapping batches lock rows in one order.
    const CLAIM_BATCH: &'static str = "INSERT INTO {table} (handler, message_id) \
         SELECT $1, id FROM unnest($2::text[]) AS batch(id) \
         ON CONFLICT DO NOTHING RETURNING message_id";
    const DEFER: &'static str = "INSERT INTO {table}_deferrals AS d \
         (handler, message_id, deferrals, first_at) VALUES ($1, $2, 1, $3) \
         ON CONFLICT (handler, message_id) DO UPDATE SET deferrals = d.deferrals + 1 \
         RETURNING deferrals, first_at";
    const DEFERRALS: &'static str = "SELECT deferrals, first_at FROM {table}_deferrals \
         WHERE handler = $1 AND message_id = $2";
    const FORGET_DEFERRALS: &'static str =
        "DELETE FROM {table}_deferrals WHERE handler = $1 AND message_id = $2";
    // Each batch resumes at the newest time the last one deleted ($3, Unix microseconds): the
    // rows it deleted stay in the index, dead, until vacuum, and a batch that started from the
    // oldest entry would step over all of them again (measured at 10 million rows: 25 ms a
    // batch, a core busy for the whole purge). EXTRACT gives numeric and whole microseconds
    // multiply an interval exactly, so the time goes and comes back unchanged. {skip_locked}
    // locks the key store's rows first, skipping those a live request holds; the inbox's and the
    // outbox's rows nothing else locks, and a batch deleting them unlocked writes half the WAL
    // (56 kB against 112 kB for 1,000 rows) in half the time. The DELETE checks the age again:
    // a row changed since the batch read it (by hand, say) is deleted only if still old enough,
    // whatever the server's recheck of a TID scan does.
    const PURGE_BATCH: &'static str = "WITH batch AS ( \
         SELECT ctid, {at} FROM {table} \
         WHERE {at} < now() - make_interval(secs => $1::bigint) \
         AND {at} >= COALESCE('epoch'::timestamptz + $3::bigint * interval '1 microsecond', \
         '-infinity') \
         ORDER BY {at} LIMIT $2{skip_locked}), \
         gone AS (DELETE FROM {table} WHERE ctid = ANY(ARRAY(SELECT ctid FROM batch)) \
         AND {at} < now() - make_interval(secs => $1::bigint) RETURNING 1) \
         SELECT (SELECT count(*) FROM gone)::bigint, \
         (EXTRACT(EPOCH FROM (SELECT max({at}) FROM batch)) * 1000000)::bigint";
    const COUNT_OLDER: &'static str =
        "SELECT count(*) FROM {table} WHERE {at} < now() - make_interval(secs => $1::bigint)";
    // n_dead_tup is the statistics collector's estimate; PostgreSQL reports no free bytes
    // without the pg_freespacemap extension.
    const TABLE_SIZE: &'static str = "SELECT pg_table_size('{table}'::regclass)::bigint, \
         pg_indexes_size('{table}'::regclass)::bigint, \
         (SELECT n_dead_tup FROM pg_stat_all_tables WHERE relid = '{table}'::regclass)::bigint, \
         NULL::bigint";
    const RECORD_DEAD: &'static str = "INSERT INTO {table}_dead (handler, message_id, reason, \
         deliveries, dead_at, topic, msg_key, headers, body) \
         VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9) \
         ON CONFLICT (handler, message_id) DO UPDATE SET reason = EXCLUDED.reason, \
         deliveries = EXCLUDED.deliveries, dead_at = EXCLUDED.dead_at, topic = EXCLUDED.topic, \
         msg_key = EXCLUDED.msg_key, headers = EXCLUDED.headers, body = EXCLUDED.body, \
         state = 'dead'";
    const INBOX_HANDLERS: &'static str = "SELECT handler, COUNT(*)::bigint, \
         (EXTRACT(EPOCH FROM (now() - MIN(seen_at))) * 1000)::bigint \
         FROM {table} GROUP BY handler ORDER BY handler";

    async fn purge_batch<'c>(
        conn: &'c mut PgConnection,
        sql: &'c TableSql,
        older_than_secs: i64,
        limit: i64,
        after_micros: Option<i64>,
    ) -> Result<(u64, Option<i64>), sqlx::Error> {
        let row = sqlx::query(sqlx::AssertSqlSafe(sql.purge_batch.clone()))
            .bind(older_than_secs)
            .bind(limit)
            .bind(after_micros)
            .fetch_one(conn)
            .await?;
        let purged = PurgedRow::read::<Postgres>(&row)?;
        Ok((purged.deleted.max(0).unsigned_abs(), purged.newest_micros))
    }

    fn bind_ids<'q>(
        query: Bound<'q, Postgres>,
        ids: &[&str],
    ) -> Result<Bound<'q, Postgres>, sqlx::Error> {
        Ok(query.bind(ids))
    }

    async fn migrate<'c>(
        conn: &'c mut PgConnection,
        lock: &'c str,
        ddl: &'c [String],
    ) -> Result<(), sqlx::Error> {
        use sqlx::Connection;
        // Concurrent CREATE TABLE IF NOT EXISTS can still collide in the catalog: take turns.
        let mut tx = conn.begin().await?;
        sqlx::query(AssertSqlSafe(format!(
            "SELECT pg_advisory_xact_lock({LOCK_KEY})"
        )))
        .bind(lock)
        .execute(&mut *tx)
        .await?;
        run_ddl::<Postgres>(&mut tx, ddl, |_| false).await?;
        tx.commit().await
    }

    async fn try_lock<'c>(conn: &'c mut PgConnection, name: &'c str) -> Result<bool, sqlx::Error> {
        sqlx::query_scalar(AssertSqlSafe(format!(
            "SELECT pg_try_advisory_lock({LOCK_KEY})"
        )))
        .bind(name)
        .fetch_one(conn)
        .await
    }

    async fn unlock<'c>(conn: &'c mut PgConnection, name: &'c str) -> Result<(), sqlx::Error> {
        sqlx::query(AssertSqlSafe(format!(
            "SELECT pg_advisory_unlock({LOCK_KEY})"
        )))
        .bind(name)
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

impl crate::backend::history::HistoryStatements for Postgres {
    const EPOCH_MS: &'static str = "(EXTRACT(EPOCH FROM {at}) * 1000)::bigint";
    const AGE_MS: &'static str = "(EXTRACT(EPOCH FROM (now() - {at})) * 1000)::bigint";
    const AGO: &'static str = "now() - make_interval(secs => {secs})";
}

impl crate::backend::steps::StepsStatements for Postgres {
    // clock_timestamp, not now(): a lease renewed late in a long transaction counts from then.
    const NOW_MS: &'static str = "(EXTRACT(EPOCH FROM clock_timestamp()) * 1000)::bigint";
    const RECORD_GUARDED: Option<&'static str> = Some(
        "WITH run AS (UPDATE {table} SET lease_until = {now} + {1} \
         WHERE handler = {2} AND message_id = {3} AND place = 0 AND token = {4} \
         RETURNING token) \
         INSERT INTO {table} (handler, message_id, place, name, token, lease_until, result) \
         SELECT {2}, {3}, {5}, {6}, token, {now}, {7} FROM run",
    );
    // The run row, unless the inbox holds the message as the statement begins: whether it was
    // written, and whether the inbox held it.
    const CLAIM_ONE: Option<&'static str> = Some(
        "WITH claimed AS (INSERT INTO {table} \
         (handler, message_id, place, name, token, lease_until) \
         SELECT {1}, {2}, 0, '', {3}, {now} + {4} WHERE NOT EXISTS (SELECT 1 FROM {done}) \
         ON CONFLICT DO NOTHING RETURNING 1) \
         SELECT (SELECT count(*) FROM claimed), (SELECT count(*) FROM {done})",
    );
    // The guard locks the run row (no renewal: the commit follows); the journal goes where the
    // fourth value is 1, else the lease ends. Whether the run held the message, and whether the
    // inbox's claim was new.
    const SETTLE_ONE: Option<&'static str> = Some(
        "WITH run AS (SELECT 1 FROM {table} WHERE handler = {1} AND message_id = {2} \
         AND place = 0 AND token = {3} FOR NO KEY UPDATE), \
         claimed AS (INSERT INTO {claims} (handler, message_id) SELECT {1}, {2} FROM run \
         ON CONFLICT DO NOTHING RETURNING 1), \
         forgot AS (DELETE FROM {table} WHERE handler = {1} AND message_id = {2} AND {4} = 1 \
         AND EXISTS (SELECT 1 FROM run) RETURNING 1), \
         ended AS (UPDATE {table} SET lease_until = {now} WHERE handler = {1} \
         AND message_id = {2} AND place = 0 AND {4} = 0 AND EXISTS (SELECT 1 FROM run) \
         RETURNING 1) \
         SELECT (SELECT count(*) FROM run), (SELECT count(*) FROM claimed)",
    );
    // A result is JSON text, so it travels as a JSON string and goes back to bytes unchanged.
    // A data-modifying `WITH` runs to its end whether or not the query reads it, and sees the
    // table as it was when the statement began. A guard locks its run row (a take-over waits
    // for the commit, then finds the token or the lease it needs); it renews the lease only
    // once a tenth of it has passed: an update of the row at every step's commit cost a new
    // row version each time. A run forgotten here neither renews nor journals: its rows go,
    // and a row written by this statement would not be seen by its delete.
    const JOURNAL_ROUND: Option<&'static str> = Some(
        "WITH r AS (SELECT * FROM json_to_recordset({1}::json) \
         AS r(h text COLLATE \"C\", i text COLLATE \"C\", t bigint, l bigint, p integer, \
         n text, v text, c boolean, f boolean)), \
         run AS (SELECT s.handler, s.message_id, s.lease_until FROM {table} s JOIN r \
         ON s.handler = r.h AND s.message_id = r.i WHERE s.place = 0 AND s.token = r.t \
         FOR NO KEY UPDATE OF s), \
         held AS (SELECT r.*, run.lease_until AS u FROM r \
         JOIN run ON run.handler = r.h AND run.message_id = r.i), \
         renewed AS (UPDATE {table} s SET lease_until = {now} + held.l FROM held \
         WHERE s.handler = held.h AND s.message_id = held.i AND s.place = 0 AND NOT held.f \
         AND (held.l = 0 OR held.u < {now} + held.l - held.l / 10) RETURNING 1), \
         journaled AS (INSERT INTO {table} \
         (handler, message_id, place, name, token, lease_until, result) \
         SELECT h, i, p, n, t, {now}, convert_to(v, 'UTF8') FROM held \
         WHERE p > 0 AND NOT f RETURNING 1), \
         forgot AS (DELETE FROM {table} s USING held \
         WHERE held.f AND s.handler = held.h AND s.message_id = held.i RETURNING 1), \
         claimed AS (INSERT INTO {claims} (handler, message_id) SELECT h, i FROM held WHERE c \
         ON CONFLICT DO NOTHING RETURNING handler, message_id) \
         SELECT i, 0::bigint FROM r WHERE NOT EXISTS \
         (SELECT 1 FROM held WHERE held.h = r.h AND held.i = r.i) \
         UNION ALL SELECT i, 1::bigint FROM held WHERE c AND NOT EXISTS \
         (SELECT 1 FROM claimed WHERE claimed.handler = held.h AND claimed.message_id = held.i)",
    );
    // The runs claimed (0), and the messages the inbox held already as the statement began
    // (1), which get no run row.
    const CLAIM_ROUND: Option<&'static str> = Some(
        "WITH r AS (SELECT * FROM json_to_recordset({1}::json) \
         AS r(h text COLLATE \"C\", i text COLLATE \"C\", t bigint, l bigint)), \
         claimed AS (INSERT INTO {table} (handler, message_id, place, name, token, lease_until) \
         SELECT r.h, r.i, 0, '', r.t, {now} + r.l FROM r WHERE NOT EXISTS (SELECT 1 FROM {done}) \
         ON CONFLICT DO NOTHING RETURNING message_id) \
         SELECT message_id, 0::bigint FROM claimed \
         UNION ALL SELECT r.i, 1::bigint FROM r WHERE EXISTS (SELECT 1 FROM {done})",
    );
    const HANDLED_ROUND: Option<&'static str> = Some(
        "SELECT r.i FROM json_to_recordset({1}::json) \
         AS r(h text COLLATE \"C\", i text COLLATE \"C\") WHERE EXISTS (SELECT 1 FROM {done})",
    );
}
