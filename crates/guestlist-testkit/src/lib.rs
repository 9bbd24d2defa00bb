//! What guestlist's test suites share: real databases (PostgreSQL, SQLite, MariaDB) found by
//! environment variable or default URL, a clear failure when one is not there, and the few lines
//! of SQL that differ between them. With the feature `brokers`, also the broker suite
//! (module `brokers`): the consumer's and the relay's stories, written once for every broker, which
//! each broker crate's tests run on its own broker.
//!
//! The guide tells the whole story, with each part's guarantees and failure tables: see
//! [tests](https://github.com/guestlist-rs/guestlist/blob/main/docs/guide/src/tests.md)
//! (or build it locally with `mdbook serve docs/guide`).

#[cfg(feature = "brokers")]
pub mod brokers;
pub mod fault_proxy;
pub mod hang_up;
pub mod held_commit;
pub mod metrics;
#[cfg(feature = "otlp")]
pub mod otlp;
pub mod own_tansu;
pub mod private_mariadb;
pub mod private_postgres;
pub mod private_server;
pub mod raw_http;
pub mod restart_clients;
pub mod skewed_clock;
mod stories;
#[cfg(feature = "webdriver")]
pub mod webdriver;

use std::future::Future;

use tempfile::TempDir;

use guestlist_sqlx::Backend;
use sqlx::{AssertSqlSafe, Pool};

/// A database the suite runs against, over a real connection.
pub trait Fixture: Backend {
    /// The backend's name in messages.
    const LABEL: &'static str;
    /// The environment variable that overrides the URL.
    const URL_VAR: &'static str;
    /// The URL used when the variable is unset; `None` for a fresh temporary file.
    const DEFAULT_URL: Option<&'static str>;
    /// How to start the server when it cannot be reached.
    const HOW_TO_START: &'static str;
    /// Whether purgers of one table take turns through a session lock.
    const PURGE_LOCK: bool;
    /// Whether two transactions can lock rows in opposite orders (and so deadlock).
    const ROW_LOCKS: bool;
    /// Whether two transactions can write at once (not SQLite: one writer at a time).
    const CONCURRENT_WRITERS: bool = Self::ROW_LOCKS;
    /// A `COMMIT` as sqlx sends it over the wire, for a [`FaultProxy`](fault_proxy::FaultProxy)
    /// to trap; `None` for an embedded database, which has no wire.
    const COMMIT_FRAME: Option<&'static [u8]>;

    /// Connects a pool of `max` connections to `url`.
    fn connect(url: &str, max: u32)
    -> impl Future<Output = Result<Pool<Self>, sqlx::Error>> + Send;

    /// Runs `sql` (one or more statements) on `conn`: written once for every backend, through
    /// [`Backend::executor`].
    fn exec(
        conn: &mut Self::Connection,
        sql: String,
    ) -> impl Future<Output = Result<u64, sqlx::Error>> + Send + '_ {
        async move {
            let done = sqlx::raw_sql(AssertSqlSafe(sql))
                .execute(Self::executor(conn))
                .await?;
            Ok(Self::rows_affected(&done))
        }
    }

    /// Runs a query that returns one integer.
    fn scalar(pool: &Pool<Self>, sql: String) -> impl Future<Output = i64> + Send;

    /// SQL that inserts `n` rows for handler `bulk` into `table`, `age_secs` old.
    fn bulk_old_rows(table: &str, n: u64, age_secs: i64) -> String;

    /// SQL for "now, minus `secs` seconds" in the type of `seen_at`.
    fn ago(secs: i64) -> String;

    /// SQL for "now, plus `secs` seconds" in the type of `seen_at`.
    fn later(secs: i64) -> String;

    /// SQL that narrows `table`'s `message_id` column to 8 characters, where the backend
    /// enforces column widths (SQLite does not).
    fn narrow_message_id(table: &str) -> Option<String>;
}

/// A pool of `max` connections with `options`, patient enough for a loaded CI machine.
pub async fn pool<DB: Backend>(
    options: <DB::Connection as sqlx::Connection>::Options,
    max: u32,
) -> Result<Pool<DB>, sqlx::Error> {
    use sqlx::Connection;
    // One plain connection first: a pool retries a refused connection until its timeout.
    DB::Connection::connect_with(&options)
        .await?
        .close()
        .await?;
    sqlx::pool::PoolOptions::<DB>::new()
        .max_connections(max)
        .acquire_timeout(std::time::Duration::from_secs(60))
        .connect_with(options)
        .await
}

/// The queries every backend runs the same way; only the connection type differs.
macro_rules! fixture_queries {
    ($conn:ty) => {
        async fn scalar(pool: &Pool<Self>, sql: String) -> i64 {
            // A test's read right after its server restarted may meet a pooled connection the
            // restart cut: such a read is tried again on a fresh one, a few times.
            let mut tries = 0;
            loop {
                let read = sqlx::query_scalar::<_, i64>(AssertSqlSafe(sql.clone()))
                    .fetch_one(pool)
                    .await;
                match read {
                    Ok(value) => return value,
                    Err(sqlx::Error::Io(_) | sqlx::Error::Protocol(_)) if tries < 5 => {
                        tries += 1;
                        tokio::time::sleep(std::time::Duration::from_millis(200)).await;
                    }
                    Err(err) => panic!("{sql}: {err}"),
                }
            }
        }
    };
}

impl Fixture for sqlx::Postgres {
    const LABEL: &'static str = "PostgreSQL";
    const URL_VAR: &'static str = "GUESTLIST_TEST_POSTGRES_URL";
    const DEFAULT_URL: Option<&'static str> = Some("postgres://postgres@127.0.0.1:5432/test");
    const HOW_TO_START: &'static str =
        "pg_ctlcluster --skip-systemctl-redirect <version> main start";
    const PURGE_LOCK: bool = true;
    const ROW_LOCKS: bool = true;
    const COMMIT_FRAME: Option<&'static [u8]> = Some(fault_proxy::POSTGRES_COMMIT);

    fixture_queries!(sqlx::PgConnection);

    async fn connect(url: &str, max: u32) -> Result<Pool<Self>, sqlx::Error> {
        pool(url.parse()?, max).await
    }

    fn bulk_old_rows(table: &str, n: u64, age_secs: i64) -> String {
        format!(
            "INSERT INTO {table} (handler, message_id, seen_at) \
             SELECT 'bulk', 'old-' || i, {} FROM generate_series(1, {n}) AS i",
            Self::ago(age_secs)
        )
    }

    fn ago(secs: i64) -> String {
        format!("now() - make_interval(secs => {secs})")
    }

    fn later(secs: i64) -> String {
        format!("now() + make_interval(secs => {secs})")
    }

    fn narrow_message_id(table: &str) -> Option<String> {
        Some(format!(
            "ALTER TABLE {table} ALTER COLUMN message_id TYPE VARCHAR(8)"
        ))
    }
}

impl Fixture for sqlx::Sqlite {
    const LABEL: &'static str = "SQLite";
    const URL_VAR: &'static str = "GUESTLIST_TEST_SQLITE_URL";
    const DEFAULT_URL: Option<&'static str> = None;
    const HOW_TO_START: &'static str =
        "nothing to start: SQLite is embedded; check the path is writable";
    const PURGE_LOCK: bool = false;
    const ROW_LOCKS: bool = false;
    const COMMIT_FRAME: Option<&'static [u8]> = None;

    fixture_queries!(sqlx::SqliteConnection);

    async fn connect(url: &str, max: u32) -> Result<Pool<Self>, sqlx::Error> {
        pool(guestlist_sqlx::sqlite_options(url)?, max).await
    }

    fn bulk_old_rows(table: &str, n: u64, age_secs: i64) -> String {
        format!(
            "WITH RECURSIVE s(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM s WHERE i < {n}) \
             INSERT INTO {table} (handler, message_id, seen_at) SELECT 'bulk', 'old-' || i, {} FROM s",
            Self::ago(age_secs)
        )
    }

    fn ago(secs: i64) -> String {
        format!("strftime('%Y-%m-%d %H:%M:%f', 'now', '-{secs} seconds')")
    }

    fn later(secs: i64) -> String {
        format!("strftime('%Y-%m-%d %H:%M:%f', 'now', '+{secs} seconds')")
    }

    fn narrow_message_id(_: &str) -> Option<String> {
        None
    }
}

impl Fixture for sqlx::MySql {
    const LABEL: &'static str = "MariaDB/MySQL";
    const URL_VAR: &'static str = "GUESTLIST_TEST_MYSQL_URL";
    const DEFAULT_URL: Option<&'static str> = Some("mysql://root@127.0.0.1:3306/test");
    const HOW_TO_START: &'static str = "/etc/init.d/mariadb start";
    const PURGE_LOCK: bool = true;
    const ROW_LOCKS: bool = true;
    const COMMIT_FRAME: Option<&'static [u8]> = Some(fault_proxy::MYSQL_COMMIT);

    fixture_queries!(sqlx::MySqlConnection);

    async fn connect(url: &str, max: u32) -> Result<Pool<Self>, sqlx::Error> {
        pool(url.parse()?, max).await
    }

    fn bulk_old_rows(table: &str, n: u64, age_secs: i64) -> String {
        // MariaDB stops recursive CTEs at 1,000 iterations unless told otherwise.
        format!(
            "SET SESSION max_recursive_iterations = {limit}; \
             INSERT INTO {table} (handler, message_id, seen_at) \
             WITH RECURSIVE s(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM s WHERE i < {n}) \
             SELECT 'bulk', CONCAT('old-', i), {} FROM s",
            Self::ago(age_secs),
            limit = n + 1
        )
    }

    fn later(secs: i64) -> String {
        format!("UTC_TIMESTAMP(6) + INTERVAL {secs} SECOND")
    }

    fn ago(secs: i64) -> String {
        format!("UTC_TIMESTAMP(6) - INTERVAL {secs} SECOND")
    }

    fn narrow_message_id(table: &str) -> Option<String> {
        Some(format!(
            "ALTER TABLE {table} MODIFY message_id VARBINARY(8) NOT NULL"
        ))
    }
}

/// A test's database: a pool on the backend's URL (or a fresh SQLite file), and the URL itself
/// for child processes.
pub struct Database<DB: Fixture> {
    /// The pool.
    pub pool: Pool<DB>,
    /// Where the database is.
    pub url: String,
    _dir: Option<TempDir>,
}

impl<DB: Fixture> Database<DB> {
    /// The backend's database: `URL_VAR` if set, else the default URL, else a new SQLite file.
    pub async fn open(max_connections: u32) -> Self {
        let (url, dir) = match (std::env::var(DB::URL_VAR).ok(), DB::DEFAULT_URL) {
            (Some(url), _) => (url, None),
            (None, Some(url)) => (url.to_owned(), None),
            (None, None) => {
                let dir = tempfile::tempdir().expect("a temporary directory");
                let path = dir.path().join("guestlist-test.db");
                (path.to_str().expect("a UTF-8 path").to_owned(), Some(dir))
            }
        };
        let mut database = Self::attach(&url, max_connections).await;
        database._dir = dir;
        database
    }

    /// The database at `url` (a child process's view of its parent's database).
    pub async fn attach(url: &str, max_connections: u32) -> Self {
        let pool = DB::connect(url, max_connections)
            .await
            .unwrap_or_else(|err| panic!("{}", explain::<DB>(url, &err)));
        Self {
            pool,
            url: url.to_owned(),
            _dir: None,
        }
    }

    /// Runs `sql` on a connection of its own, outside any transaction.
    pub async fn exec(&self, sql: String) -> u64 {
        let mut conn = self.pool.acquire().await.expect("a connection");
        DB::exec(&mut conn, sql.clone())
            .await
            .unwrap_or_else(|err| panic!("{sql}: {err}"))
    }

    /// Runs a query that returns one integer.
    pub async fn scalar(&self, sql: String) -> i64 {
        DB::scalar(&self.pool, sql).await
    }
}

/// What a failed connection means, and what to do about it.
pub fn explain<DB: Fixture>(url: &str, err: &sqlx::Error) -> String {
    let what_to_do = match err {
        sqlx::Error::Io(_) | sqlx::Error::PoolTimedOut => format!(
            "Nothing answers there. Run scripts/test.sh, which installs and starts every service \
             the tests need, or start it with `{}`, or point {} at a running server.",
            DB::HOW_TO_START,
            DB::URL_VAR
        ),
        _ => format!(
            "The server answered but refused: check the user, password and database, and set {} \
             to a URL that works.",
            DB::URL_VAR
        ),
    };
    format!("{} at {url}: {err}\n{what_to_do}", DB::LABEL)
}

/// Two letters of each word of a test's name: short enough for table names, readable enough to
/// find a test's leftover tables.
pub fn short_tag(name: &str) -> String {
    name.split('_')
        .map(|word| &word[..word.len().min(2)])
        .collect::<Vec<_>>()
        .join("_")
}
