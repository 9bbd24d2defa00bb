//! SQLite: the embedded default. WAL, a busy timeout, `BEGIN IMMEDIATE`, a batch through
//! `json_each`.

use std::str::FromStr;
use std::time::Duration;

use sqlx::error::DatabaseError;
use sqlx::sqlite::{
    SqliteConnectOptions, SqliteConnection, SqliteError, SqliteJournalMode, SqliteSynchronous,
};
use sqlx::{Connection, Pool, Sqlite, Transaction};

use super::sealed::Statements;
use super::statement::Bound;
use super::table::run_ddl;

/// SQLite's primary result codes after which the transaction may be run again.
const SQLITE_BUSY: i32 = 5;
const SQLITE_LOCKED: i32 = 6;

/// How long a connection waits for another writer before it reports the database busy.
pub const SQLITE_BUSY_TIMEOUT: Duration = Duration::from_secs(30);

/// Connection options guestlist recommends for a SQLite file: created if missing, WAL (readers
/// never block the writer), `synchronous = FULL` (a commit survives a power cut, not only a
/// crash) and a busy timeout of [`SQLITE_BUSY_TIMEOUT`] so that writers queue instead of failing.
///
/// Takes a `sqlite:` URL or a plain path.
///
/// ```
/// # fn main() -> Result<(), sqlx::Error> {
/// let options = guestlist_sqlx::sqlite_options("sqlite:guestlist.db")?;
/// assert_eq!(options.get_filename().to_str(), Some("guestlist.db"));
/// # Ok(()) }
/// ```
pub fn sqlite_options(url_or_path: &str) -> Result<SqliteConnectOptions, sqlx::Error> {
    let options = if url_or_path.starts_with("sqlite:") {
        SqliteConnectOptions::from_str(url_or_path)?
    } else {
        SqliteConnectOptions::new().filename(url_or_path)
    };
    Ok(options
        .create_if_missing(true)
        .journal_mode(SqliteJournalMode::Wal)
        .synchronous(SqliteSynchronous::Full)
        .busy_timeout(SQLITE_BUSY_TIMEOUT))
}

pub(super) fn is_retryable(err: &dyn DatabaseError) -> Option<bool> {
    let err = err.try_downcast_ref::<SqliteError>()?;
    let code = err.code().and_then(|c| c.parse::<i32>().ok()).unwrap_or(0);
    Some(matches!(code & 0xff, SQLITE_BUSY | SQLITE_LOCKED))
}

mod keys;
mod outbox;
mod rounds;

backend!(Sqlite, SqliteConnection);

impl Statements for Sqlite {
    const BACKEND: &'static str = "sqlite";
    const INBOX_DDL: &'static str = include_str!("../../../sql/sqlite/inbox.sql");
    const SINGLE_WRITER: bool = true;
    const CLAIM: &'static str =
        "INSERT INTO {table} (handler, message_id) VALUES (?1, ?2) ON CONFLICT DO NOTHING";
    // `WHERE true` settles SQLite's parsing ambiguity between INSERT … SELECT and ON CONFLICT.
    const CLAIM_BATCH: &'static str = "INSERT INTO {table} (handler, message_id) \
         SELECT ?1, value FROM json_each(?2) WHERE true \
         ON CONFLICT DO NOTHING RETURNING message_id";
    const DEFER: &'static str = "INSERT INTO {table}_deferrals AS d \
         (handler, message_id, deferrals, first_at) VALUES (?1, ?2, 1, ?3) \
         ON CONFLICT (handler, message_id) DO UPDATE SET deferrals = d.deferrals + 1 \
         RETURNING deferrals, first_at";
    const DEFERRALS: &'static str = "SELECT deferrals, first_at FROM {table}_deferrals \
         WHERE handler = ?1 AND message_id = ?2";
    const FORGET_DEFERRALS: &'static str =
        "DELETE FROM {table}_deferrals WHERE handler = ?1 AND message_id = ?2";
    // Each batch first waits its turn for the one write lock, behind live claims: at a million
    // rows with 4 workers claiming, batches of 5,000 deleted 14,180 rows/s, of 1,000 only 4,882.
    const PURGE_BATCH_SIZE: u32 = 5_000;
    const PURGE_BATCH: &'static str = "DELETE FROM {table} WHERE rowid IN ( \
         SELECT rowid FROM {table} \
         WHERE {at} < strftime('%Y-%m-%d %H:%M:%f', 'now', '-' || ?1 || ' seconds') \
         ORDER BY {at} LIMIT ?2)";
    const COUNT_OLDER: &'static str = "SELECT count(*) FROM {table} \
         WHERE {at} < strftime('%Y-%m-%d %H:%M:%f', 'now', '-' || ?1 || ' seconds')";
    // dbstat (built into the bundled SQLite) sums the pages of the table and of its indexes.
    // SQLite keeps no dead rows: deleted rows' pages go to the file's free list.
    const TABLE_SIZE: &'static str = "SELECT \
         (SELECT SUM(pgsize) FROM dbstat('main', 1) WHERE name = '{table}'), \
         (SELECT SUM(pgsize) FROM dbstat('main', 1) WHERE name IN \
          (SELECT name FROM sqlite_schema WHERE type = 'index' AND tbl_name = '{table}')), \
         NULL, \
         (SELECT freelist_count * page_size FROM pragma_freelist_count(), pragma_page_size())";
    const RECORD_DEAD: &'static str = "INSERT INTO {table}_dead (handler, message_id, reason, \
         deliveries, dead_at, topic, msg_key, headers, body) \
         VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9) \
         ON CONFLICT (handler, message_id) DO UPDATE SET reason = excluded.reason, \
         deliveries = excluded.deliveries, dead_at = excluded.dead_at, topic = excluded.topic, \
         msg_key = excluded.msg_key, headers = excluded.headers, body = excluded.body, \
         state = 'dead'";
    const INBOX_HANDLERS: &'static str = "SELECT handler, COUNT(*), \
         CAST(round((julianday('now') - julianday(MIN(seen_at))) * 86400000.0) AS INTEGER) \
         FROM {table} GROUP BY handler ORDER BY handler";

    async fn begin(pool: &Pool<Sqlite>) -> Result<Transaction<'static, Sqlite>, sqlx::Error> {
        // Take the write lock up front: a deferred transaction that reads first can fail with
        // SQLITE_BUSY_SNAPSHOT when it later writes, and no busy timeout helps with that.
        pool.begin_with("BEGIN IMMEDIATE").await
    }

    fn bind_ids<'q>(
        query: Bound<'q, Sqlite>,
        ids: &[&str],
    ) -> Result<Bound<'q, Sqlite>, sqlx::Error> {
        let ids = serde_json::to_string(ids).map_err(|e| sqlx::Error::Encode(Box::new(e)))?;
        Ok(query.bind(ids))
    }

    async fn migrate<'c>(
        conn: &'c mut SqliteConnection,
        _lock: &'c str,
        ddl: &'c [String],
    ) -> Result<(), sqlx::Error> {
        // One file, one writer: the write lock taken up front is the turn.
        let mut tx = conn.begin_with("BEGIN IMMEDIATE").await?;
        run_ddl::<Sqlite>(&mut tx, ddl, |err| {
            err.as_database_error()
                .is_some_and(|e| e.message().starts_with("duplicate column name"))
        })
        .await?;
        tx.commit().await
    }

    async fn try_lock<'c>(_: &'c mut SqliteConnection, _: &'c str) -> Result<bool, sqlx::Error> {
        // One file, one writer at a time: purgers already take turns.
        Ok(true)
    }

    async fn unlock<'c>(_: &'c mut SqliteConnection, _: &'c str) -> Result<(), sqlx::Error> {
        Ok(())
    }

    fn is_missing_table(err: &sqlx::Error) -> bool {
        err.as_database_error()
            .is_some_and(|e| e.message().starts_with("no such table"))
    }

    // A transaction begun with BEGIN IMMEDIATE holds the write lock from its start, so a write
    // inside it is never busy: one that is was begun deferred and had read first.
    fn is_late_write_lock(err: &sqlx::Error) -> bool {
        err.as_database_error()
            .and_then(|e| e.try_downcast_ref::<SqliteError>())
            .and_then(|e| e.code())
            .and_then(|code| code.parse::<i32>().ok())
            .is_some_and(|code| code & 0xff == SQLITE_BUSY)
    }
}

impl crate::backend::history::HistoryStatements for Sqlite {
    // The times are UTC text; the Unix epoch is Julian day 2440587.5.
    const EPOCH_MS: &'static str =
        "CAST(round((julianday({at}) - 2440587.5) * 86400000.0) AS INTEGER)";
    const AGE_MS: &'static str =
        "CAST(round((julianday('now') - julianday({at})) * 86400000.0) AS INTEGER)";
    const AGO: &'static str = "strftime('%Y-%m-%d %H:%M:%f', 'now', '-{secs} seconds')";
}

impl crate::backend::steps::StepsStatements for Sqlite {
    // The Unix epoch is Julian day 2440587.5.
    const NOW_MS: &'static str =
        "CAST(round((julianday('now') - 2440587.5) * 86400000.0) AS INTEGER)";
}
