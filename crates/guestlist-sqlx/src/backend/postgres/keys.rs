//! PostgreSQL's key statements: the key table's SQL, and the claim on the handler's transaction
//! behind an advisory lock.

use sqlx::Postgres;

use crate::backend::sealed::KeyStatements;

/// The number of a key's advisory lock: a hash of the table, the scope's length, the scope and
/// the key ($1 and $2), so that no two (scope, key) pairs share one but by chance.
macro_rules! key_lock {
    () => {
        "hashtextextended('{table}:' || length($1::text) || ':' || $1 || $2, 0)"
    };
}

/// A key's name in its notifications: the scope's length, the scope and the key, so that no
/// two (scope, key) pairs share one.
macro_rules! key_name {
    ($scope:literal, $key:literal) => {
        concat!(
            "length(",
            $scope,
            "::text) || ':' || ",
            $scope,
            " || ",
            $key
        )
    };
}

/// The first half of every holder's advisory lock ("glst"), the second its number: the two-key
/// form, apart from the one-key locks of the keys themselves.
macro_rules! holder_locks {
    () => {
        "1735160692"
    };
}

impl KeyStatements for Postgres {
    const KEYS_DDL: &'static str = include_str!("../../../sql/postgres/keys.sql");
    const KEY_INSERT: &'static str = "INSERT INTO {table} \
         (scope, idempotency_key, fingerprint, token, locked_until, holder) \
         VALUES ($1, $2, $3, $4, now() + interval '1 millisecond' * $5, $6) \
         ON CONFLICT DO NOTHING";
    const KEY_SELECT: &'static str = "SELECT fingerprint, status, headers, body, attempt, token, \
         (EXTRACT(EPOCH FROM (locked_until - now())) * 1000)::bigint, holder \
         FROM {table} WHERE scope = $1 AND idempotency_key = $2";
    const KEY_TAKE_OVER: &'static str = "UPDATE {table} \
         SET attempt = attempt + 1, token = $1, locked_until = now() + interval '1 millisecond' * $2 \
         WHERE scope = $3 AND idempotency_key = $4 AND token = $5 \
         AND status IS NULL AND locked_until <= now()";
    // The answer's UPDATE tells the requests waiting in other processes (`LISTEN "{table}"`)
    // when one marked the row (KEY_MARK_WAITED): the notification leaves with the commit, and
    // a key nobody waits on pays nothing for it. Rows read back: 1 when stored.
    const KEY_COMPLETE: &'static str = concat!(
        "WITH done AS (UPDATE {table} \
         SET status = $1, headers = $2, body = $3, locked_until = NULL \
         WHERE scope = $4 AND idempotency_key = $5 AND token = $6 AND status IS NULL \
         RETURNING waited), \
         told AS (SELECT pg_notify('{table}', ",
        key_name!("$4", "$5"),
        ") FROM done WHERE waited) \
         SELECT 1 FROM done WHERE (SELECT count(*) FROM told) >= 0"
    );
    const KEY_RELEASE: &'static str = concat!(
        "WITH gone AS (DELETE FROM {table} \
         WHERE scope = $1 AND idempotency_key = $2 AND token = $3 AND status IS NULL \
         RETURNING waited), \
         told AS (SELECT pg_notify('{table}', ",
        key_name!("$1", "$2"),
        ") FROM gone WHERE waited) \
         SELECT 1 FROM gone WHERE (SELECT count(*) FROM told) >= 0"
    );
    const KEY_EVICT: &'static str = "DELETE FROM {table} WHERE scope = $1 AND idempotency_key = $2";
    const KEY_USAGE: &'static str = "SELECT (COUNT(*) FILTER (WHERE status IS NULL))::bigint, \
         COUNT(*)::bigint FROM {table} WHERE scope = $1";
    // Newest first, along the created_at index: the keys in flight are mostly the newest.
    const KEY_IN_FLIGHT: &'static str = "SELECT scope, idempotency_key, attempt::bigint, \
         (EXTRACT(EPOCH FROM (locked_until - now())) * 1000)::bigint, \
         (EXTRACT(EPOCH FROM (now() - created_at)) * 1000)::bigint \
         FROM {table} WHERE status IS NULL ORDER BY created_at DESC LIMIT $1";
    const KEY_STATS: &'static str = "SELECT COUNT(*)::bigint, \
         (COUNT(*) FILTER (WHERE status IS NULL))::bigint, \
         (EXTRACT(EPOCH FROM (now() - MIN(created_at))) * 1000)::bigint, \
         pg_total_relation_size('{table}'::regclass)::bigint \
         FROM {table}";
    // The lock is tried first and only a holder inserts: a retry never queues behind the
    // uncommitted row of the attempt in flight (its number: `key_lock!`).
    // The transaction may sit idle for the lease at most: past it, PostgreSQL ends the session,
    // the claim rolls back with the writes, and a retry may run. The key's row is not read
    // along: a claim that inserted needs none, and a join to read it made every new key's claim
    // cost a fifth of a request more (guide, performance); a retry reads it next.
    const KEY_CLAIM_LOCKED: &'static str = concat!(
        "WITH lock AS (SELECT pg_try_advisory_xact_lock(",
        key_lock!(),
        ") AS held, \
         set_config('idle_in_transaction_session_timeout', $5::text, true) AS idle_limit), \
         claim AS (INSERT INTO {table} \
         (scope, idempotency_key, fingerprint, token, locked_until) \
         SELECT $1, $2, $3, $4, now() + interval '1 millisecond' * $5 FROM lock WHERE held \
         ON CONFLICT DO NOTHING RETURNING 1) \
         SELECT (SELECT held FROM lock), EXISTS (SELECT 1 FROM claim)"
    );
    // The same lock, held by the session (it outlasts a rollback) while a kept claim is written
    // again, and let go.
    const KEY_HOLD_LOCK: &'static str = concat!("SELECT pg_advisory_lock(", key_lock!(), ")");
    const KEY_LET_GO_LOCK: &'static str = concat!("SELECT pg_advisory_unlock(", key_lock!(), ")");
    const KEY_CUT_LEASE: &'static str = "UPDATE {table} SET locked_until = now() \
         WHERE scope = $1 AND idempotency_key = $2 AND token = $3 AND status IS NULL";
    const KEY_UNHOLD: &'static str = "UPDATE {table} SET holder = NULL \
         WHERE scope = $1 AND idempotency_key = $2 AND token = $3 AND status IS NULL";
    const KEY_MARK_WAITED: &'static str = "UPDATE {table} SET waited = true \
         WHERE scope = $1 AND idempotency_key = $2 AND status IS NULL";
    // A session-scoped advisory lock on (HOLDER_LOCKS, the holder's number): it ends with the
    // session, and pg_locks shows it to every session.
    const KEY_HOLDER_LOCK: &'static str = concat!(
        "SELECT pg_try_advisory_lock(",
        holder_locks!(),
        ", $1::integer)::integer::bigint"
    );
    const KEY_HOLDER_ALIVE: &'static str = concat!(
        "SELECT EXISTS (SELECT 1 FROM pg_locks WHERE locktype = 'advisory' \
         AND classid = ",
        holder_locks!(),
        "::bigint::oid AND objid = $1::bigint::oid AND objsubid = 2 AND granted)::integer::bigint"
    );
}
