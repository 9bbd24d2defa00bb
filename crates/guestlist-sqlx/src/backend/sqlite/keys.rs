//! SQLite's key statements: the key table's SQL, with leases in SQLite's text time.

use sqlx::Sqlite;

use crate::backend::sealed::KeyStatements;

/// "Now, plus a number of milliseconds" as SQLite text time.
macro_rules! sqlite_now_plus_ms {
    ($param:literal) => {
        concat!(
            "strftime('%Y-%m-%d %H:%M:%f', 'now', '+' || (",
            $param,
            " / 1000.0) || ' seconds')"
        )
    };
}

impl KeyStatements for Sqlite {
    const KEYS_DDL: &'static str = include_str!("../../../sql/sqlite/keys.sql");
    const KEY_INSERT: &'static str = concat!(
        "INSERT INTO {table} (scope, idempotency_key, fingerprint, token, locked_until, holder) \
         VALUES (?1, ?2, ?3, ?4, ",
        sqlite_now_plus_ms!("?5"),
        ", ?6) ON CONFLICT DO NOTHING"
    );
    const KEY_SELECT: &'static str = "SELECT fingerprint, status, headers, body, attempt, token, \
         CAST(round((julianday(locked_until) - julianday('now')) * 86400000.0) AS INTEGER), \
         holder FROM {table} WHERE scope = ?1 AND idempotency_key = ?2";
    const KEY_TAKE_OVER: &'static str = concat!(
        "UPDATE {table} SET attempt = attempt + 1, token = ?1, locked_until = ",
        sqlite_now_plus_ms!("?2"),
        " WHERE scope = ?3 AND idempotency_key = ?4 AND token = ?5 AND status IS NULL \
         AND locked_until <= strftime('%Y-%m-%d %H:%M:%f', 'now')"
    );
    const KEY_COMPLETE: &'static str = "UPDATE {table} \
         SET status = ?1, headers = ?2, body = ?3, locked_until = NULL \
         WHERE scope = ?4 AND idempotency_key = ?5 AND token = ?6 AND status IS NULL";
    const KEY_RELEASE: &'static str = "DELETE FROM {table} \
         WHERE scope = ?1 AND idempotency_key = ?2 AND token = ?3 AND status IS NULL";
    const KEY_EVICT: &'static str = "DELETE FROM {table} WHERE scope = ?1 AND idempotency_key = ?2";
    // SQLite has no size per table without the dbstat module: the whole file's size instead.
    const KEY_USAGE: &'static str =
        "SELECT COALESCE(SUM(status IS NULL), 0), COUNT(*) FROM {table} WHERE scope = ?1";
    const KEY_IN_FLIGHT: &'static str = "SELECT scope, idempotency_key, attempt, \
         CAST(round((julianday(locked_until) - julianday('now')) * 86400000.0) AS INTEGER), \
         CAST(round((julianday('now') - julianday(created_at)) * 86400000.0) AS INTEGER) \
         FROM {table} WHERE status IS NULL ORDER BY created_at DESC LIMIT ?1";
    const KEY_STATS: &'static str = "SELECT COUNT(*), \
         COALESCE(SUM(status IS NULL), 0), \
         CAST(round((julianday('now') - julianday(MIN(created_at))) * 86400000.0) AS INTEGER), \
         (SELECT page_count * page_size FROM pragma_page_count(), pragma_page_size()) \
         FROM {table}";
    const KEY_CUT_LEASE: &'static str = "UPDATE {table} \
         SET locked_until = strftime('%Y-%m-%d %H:%M:%f', 'now') \
         WHERE scope = ?1 AND idempotency_key = ?2 AND token = ?3 AND status IS NULL";
    const KEY_UNHOLD: &'static str = "UPDATE {table} SET holder = NULL \
         WHERE scope = ?1 AND idempotency_key = ?2 AND token = ?3 AND status IS NULL";
}
