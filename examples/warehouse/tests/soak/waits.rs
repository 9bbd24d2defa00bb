//! What the database's sessions were doing once the run settled: a part that never finished its
//! work is often waiting on a lock or a transaction left open, and this names which.

use std::time::Duration;

use guestlist::sqlx::PgPool;

/// Sessions of the run's database busy for longer than `over` (in a statement, or in a
/// transaction left open), each with what it waits on and its statement's first words.
pub async fn busy_sessions(pool: &PgPool, over: Duration) -> Vec<String> {
    let sql = "SELECT format('pid %s (%s) %s for %s s, waiting on %s: %s', pid, \
               coalesce(nullif(application_name, ''), client_addr::text, '?'), state, \
               round(extract(epoch FROM now() - coalesce(xact_start, query_start))::numeric, 1), \
               coalesce(wait_event_type || '/' || wait_event, 'nothing'), \
               left(regexp_replace(query, '\\s+', ' ', 'g'), 120)) \
               FROM pg_stat_activity \
               WHERE datname = current_database() AND pid <> pg_backend_pid() \
               AND state <> 'idle' \
               AND now() - coalesce(xact_start, query_start) > make_interval(secs => $1) \
               ORDER BY xact_start";
    guestlist::sqlx::query_scalar(sql)
        .bind(over.as_secs_f64())
        .fetch_all(pool)
        .await
        .unwrap_or_else(|err| vec![format!("cannot read pg_stat_activity: {err}")])
}
