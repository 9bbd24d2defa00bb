//! MySQL's and MariaDB's key statements: the key table's SQL (a plain `INSERT`, for the
//! reasons the module above gives).

use sqlx::MySql;

use crate::backend::sealed::KeyStatements;

impl KeyStatements for MySql {
    const KEYS_DDL: &'static str = include_str!("../../../sql/mysql/keys.sql");
    // A plain INSERT, for the reasons the module's documentation gives.
    const KEY_INSERT: &'static str = "INSERT INTO {table} \
         (scope, idempotency_key, fingerprint, token, locked_until, holder) \
         VALUES (?, ?, ?, ?, UTC_TIMESTAMP(6) + INTERVAL (? * 1000) MICROSECOND, ?)";
    const KEY_SELECT: &'static str = "SELECT fingerprint, status, headers, body, attempt, token, \
         TIMESTAMPDIFF(MICROSECOND, UTC_TIMESTAMP(6), locked_until) DIV 1000, holder \
         FROM {table} WHERE scope = ? AND idempotency_key = ?";
    const KEY_TAKE_OVER: &'static str = "UPDATE {table} \
         SET attempt = attempt + 1, token = ?, \
         locked_until = UTC_TIMESTAMP(6) + INTERVAL (? * 1000) MICROSECOND \
         WHERE scope = ? AND idempotency_key = ? AND token = ? \
         AND status IS NULL AND locked_until <= UTC_TIMESTAMP(6)";
    const KEY_COMPLETE: &'static str = "UPDATE {table} \
         SET status = ?, headers = ?, body = ?, locked_until = NULL \
         WHERE scope = ? AND idempotency_key = ? AND token = ? AND status IS NULL";
    const KEY_RELEASE: &'static str = "DELETE FROM {table} \
         WHERE scope = ? AND idempotency_key = ? AND token = ? AND status IS NULL";
    const KEY_EVICT: &'static str = "DELETE FROM {table} WHERE scope = ? AND idempotency_key = ?";
    const KEY_USAGE: &'static str = "SELECT CAST(COALESCE(SUM(status IS NULL), 0) AS SIGNED), \
         COUNT(*) FROM {table} WHERE scope = ?";
    const KEY_IN_FLIGHT: &'static str = "SELECT CAST(scope AS CHAR), CAST(idempotency_key AS CHAR), \
         CAST(attempt AS SIGNED), \
         CAST(TIMESTAMPDIFF(MICROSECOND, UTC_TIMESTAMP(6), locked_until) DIV 1000 AS SIGNED), \
         CAST(TIMESTAMPDIFF(MICROSECOND, created_at, UTC_TIMESTAMP(6)) DIV 1000 AS SIGNED) \
         FROM {table} WHERE status IS NULL ORDER BY created_at DESC LIMIT ?";
    const KEY_STATS: &'static str = "SELECT COUNT(*), \
         CAST(COALESCE(SUM(status IS NULL), 0) AS SIGNED), \
         CAST(TIMESTAMPDIFF(MICROSECOND, MIN(created_at), UTC_TIMESTAMP(6)) DIV 1000 AS SIGNED), \
         (SELECT CAST(data_length + index_length AS SIGNED) FROM information_schema.tables \
          WHERE table_schema = DATABASE() AND table_name = '{table}') \
         FROM {table}";
    const KEY_CUT_LEASE: &'static str = "UPDATE {table} SET locked_until = UTC_TIMESTAMP(6) \
         WHERE scope = ? AND idempotency_key = ? AND token = ? AND status IS NULL";
    const KEY_UNHOLD: &'static str = "UPDATE {table} SET holder = NULL \
         WHERE scope = ? AND idempotency_key = ? AND token = ? AND status IS NULL";
    // A named lock of the session (GET_LOCK): it ends with the session, and IS_USED_LOCK tells
    // every session whether it is held. The names are the server's, whatever the schema.
    const KEY_HOLDER_LOCK: &'static str =
        "SELECT CAST(COALESCE(GET_LOCK(CONCAT('guestlist_holder_', ?), 0), 0) AS SIGNED)";
    const KEY_HOLDER_ALIVE: &'static str =
        "SELECT CAST(IS_USED_LOCK(CONCAT('guestlist_holder_', ?)) IS NOT NULL AS SIGNED)";
}
