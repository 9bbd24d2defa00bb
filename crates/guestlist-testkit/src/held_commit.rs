//! A PostgreSQL commit held open on purpose, so that a test can act inside its window.
//!
//! A deferred constraint trigger on the table waits, at commit, for an advisory lock the test
//! holds; the test sees the commit waiting in `pg_locks`, does what it came to do (hang up a
//! client, kill a process), and only then lets the commit go on.

use std::time::{Duration, Instant};

use sqlx::{AssertSqlSafe, Connection, PgConnection};

/// How long [`HeldCommit::until_waiting`] waits for a commit to arrive.
const PATIENCE: Duration = Duration::from_secs(30);

/// The change whose commit is held.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Change {
    /// A row inserted.
    Insert,
    /// A row updated so that the condition (on `NEW`) holds: `NEW.status IS NOT NULL`.
    Update(&'static str),
    /// A row deleted.
    Delete,
}

/// Commits that change `table` as `change` says wait until [`release`](Self::release).
#[derive(Debug)]
pub struct HeldCommit {
    conn: PgConnection,
    url: String,
    lock: i64,
}

impl HeldCommit {
    /// Installs the trigger on `table` (which must exist) at `url`, and holds its lock.
    pub async fn on(url: &str, table: &str, change: Change) -> Self {
        // One lock number per table: tests run side by side on one server.
        let lock = i64::from(
            table
                .bytes()
                .fold(7u32, |h, b| h.wrapping_mul(31).wrapping_add(u32::from(b)))
                & 0x7fff_ffff,
        );
        let (event, when) = match change {
            Change::Insert => ("INSERT", "TRUE"),
            Change::Update(when) => ("UPDATE", when),
            Change::Delete => ("DELETE", "TRUE"),
        };
        let mut conn = PgConnection::connect(url)
            .await
            .unwrap_or_else(|err| panic!("PostgreSQL at {url}: {err}"));
        for statement in [
            format!(
                "CREATE OR REPLACE FUNCTION hold_{table}() RETURNS trigger LANGUAGE plpgsql AS $$ \
                 BEGIN PERFORM pg_advisory_xact_lock({lock}); RETURN NULL; END $$"
            ),
            format!("DROP TRIGGER IF EXISTS hold_{table} ON {table}"),
            format!(
                "CREATE CONSTRAINT TRIGGER hold_{table} AFTER {event} ON {table} DEFERRABLE \
                 INITIALLY DEFERRED FOR EACH ROW WHEN ({when}) EXECUTE FUNCTION hold_{table}()"
            ),
            format!("SELECT pg_advisory_lock({lock})"),
        ] {
            sqlx::raw_sql(AssertSqlSafe(statement))
                .execute(&mut conn)
                .await
                .unwrap();
        }
        Self {
            conn,
            url: url.to_owned(),
            lock,
        }
    }

    /// Returns once a commit waits on the held lock.
    pub async fn until_waiting(&self) {
        let started = Instant::now();
        let mut probe = PgConnection::connect(&self.url).await.unwrap();
        loop {
            let waiting: i64 = sqlx::query_scalar(
                "SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND NOT granted \
                 AND classid = 0 AND objid = $1::bigint::oid AND objsubid = 1",
            )
            .bind(self.lock)
            .fetch_one(&mut probe)
            .await
            .unwrap();
            if waiting > 0 {
                return;
            }
            assert!(
                started.elapsed() < PATIENCE,
                "no commit reached the held trigger in {PATIENCE:?}"
            );
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    }

    /// Ends the sessions whose commits wait on the held lock (`pg_terminate_backend`): the
    /// database rolls them back, and their clients see the connection close.
    pub async fn end_waiting(&self) {
        let mut probe = PgConnection::connect(&self.url).await.unwrap();
        sqlx::query(
            "SELECT pg_terminate_backend(pid) FROM pg_locks WHERE locktype = 'advisory' \
             AND NOT granted AND classid = 0 AND objid = $1::bigint::oid AND objsubid = 1",
        )
        .bind(self.lock)
        .execute(&mut probe)
        .await
        .unwrap();
    }

    /// Lets the held commits go on (and later ones through).
    pub async fn release(mut self) {
        sqlx::query("SELECT pg_advisory_unlock($1)")
            .bind(self.lock)
            .execute(&mut self.conn)
            .await
            .unwrap();
    }
}
