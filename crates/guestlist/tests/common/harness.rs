//! One test's own tables on a real database: an inbox, an `orders` table and a `pick_tasks`
//! table, named after the test so that tests running at once never share rows.

use guestlist::sqlx::{self, Pool};
use guestlist::{HandlerName, Inbox, MessageId, WorkFuture};
use tempfile::TempDir;

use super::fixture::Fixture;

/// The order every story is about.
pub const ORDER: i64 = 42;

/// A test's pool, inbox and work tables.
pub struct Harness<DB: Fixture> {
    pub pool: Pool<DB>,
    pub inbox: Inbox<DB>,
    /// Where the database is, for child processes.
    pub url: String,
    pub tag: String,
    _dir: Option<TempDir>,
}

impl<DB: Fixture> Harness<DB> {
    /// Fresh tables for the test `name`, on the backend's URL (or a new SQLite file).
    pub async fn new(name: &str) -> Self {
        let tag = short_tag(name);
        let tag = tag.as_str();
        let (url, dir) = match (std::env::var(DB::URL_VAR).ok(), DB::DEFAULT_URL) {
            (Some(url), _) => (url, None),
            (None, Some(url)) => (url.to_owned(), None),
            (None, None) => {
                let dir = tempfile::tempdir().expect("a temporary directory");
                let path = dir.path().join("guestlist-test.db");
                (path.to_str().expect("a UTF-8 path").to_owned(), Some(dir))
            }
        };
        let mut harness = Self::attach(&url, tag, 32).await;
        harness._dir = dir;
        harness.reset().await;
        harness
    }

    /// The tables of test `tag` at `url`, as they are (for a child process).
    pub async fn attach(url: &str, tag: &str, max_connections: u32) -> Self {
        let pool = DB::connect(url, max_connections)
            .await
            .unwrap_or_else(|err| {
                let what_to_do = match err {
                    sqlx::Error::Io(_) | sqlx::Error::PoolTimedOut => format!(
                        "Nothing answers there. Run scripts/test.sh, which installs and starts every \
                         service the tests need, or start it with `{}`, or point {} at a running server.",
                        DB::HOW_TO_START,
                        DB::URL_VAR
                    ),
                    _ => format!(
                        "The server answered but refused: check the user, password and database, and \
                         set {} to a URL that works.",
                        DB::URL_VAR
                    ),
                };
                panic!("{} at {url}: {err}\n{what_to_do}", DB::LABEL)
            });
        let inbox = Inbox::with_table(&format!("gl_{tag}")).expect("a valid table name");
        Self {
            pool,
            inbox,
            url: url.to_owned(),
            tag: tag.to_owned(),
            _dir: None,
        }
    }

    async fn reset(&self) {
        for table in [self.inbox.table().to_string(), self.orders(), self.picks()] {
            self.exec(format!("DROP TABLE IF EXISTS {table}")).await;
        }
        self.inbox.migrate(&self.pool).await.expect("migrate");
        self.exec(format!(
            "CREATE TABLE {} (id BIGINT PRIMARY KEY, status VARCHAR(16) NOT NULL)",
            self.orders()
        ))
        .await;
        self.exec(format!(
            "CREATE TABLE {} (order_id BIGINT NOT NULL, event VARCHAR(255) NOT NULL)",
            self.picks()
        ))
        .await;
        self.exec(format!(
            "INSERT INTO {} (id, status) VALUES ({ORDER}, 'PAID')",
            self.orders()
        ))
        .await;
    }

    pub fn orders(&self) -> String {
        format!("orders_{}", self.tag)
    }

    pub fn picks(&self) -> String {
        format!("picks_{}", self.tag)
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

    /// The warehouse's work for `event`: the order goes to PICKING (idempotent by shape) and a
    /// pick task is appended (not idempotent: the reason for the inbox).
    pub fn pick_sql(&self, event: &MessageId) -> String {
        format!(
            "UPDATE {orders} SET status = 'PICKING' WHERE id = {ORDER}; \
             INSERT INTO {picks} (order_id, event) VALUES ({ORDER}, '{event}')",
            orders = self.orders(),
            picks = self.picks(),
        )
    }

    /// The pick work as a unit of work for `Inbox::process`.
    pub fn pick(
        &self,
        event: &MessageId,
    ) -> impl for<'c> FnMut(&'c mut DB::Connection) -> WorkFuture<'c, u64, sqlx::Error> + Send + 'static
    {
        let sql = self.pick_sql(event);
        move |tx| DB::exec(tx, sql.clone())
    }

    /// Pick tasks created for `event`.
    pub async fn picks_for(&self, event: &MessageId) -> i64 {
        self.scalar(format!(
            "SELECT count(*) FROM {} WHERE event = '{event}'",
            self.picks()
        ))
        .await
    }

    /// Pick tasks in all.
    pub async fn all_picks(&self) -> i64 {
        self.scalar(format!("SELECT count(*) FROM {}", self.picks()))
            .await
    }

    /// Rows in the inbox table.
    pub async fn inbox_rows(&self) -> i64 {
        self.scalar(format!("SELECT count(*) FROM {}", self.inbox.table()))
            .await
    }

    /// Begins a transaction on a connection of its own.
    pub async fn begin(&self) -> sqlx::Transaction<'static, DB> {
        self.pool.begin().await.expect("begin")
    }
}

/// Two letters of each word of a test's name: short enough for table names, readable enough to
/// find a test's leftover tables.
pub fn short_tag(name: &str) -> String {
    name.split('_')
        .map(|word| &word[..word.len().min(2)])
        .collect::<Vec<_>>()
        .join("_")
}

/// A handler name that is known to be valid.
pub fn handler(name: &str) -> HandlerName {
    HandlerName::new(name).expect("a valid handler name")
}

/// A message id that is known to be valid.
pub fn id(value: &str) -> MessageId {
    MessageId::new(value).expect("a valid message id")
}
