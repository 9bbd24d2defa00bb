//! One test's own tables on a real database: an inbox, an `orders` table and a `pick_tasks`
//! table, named after the test so that tests running at once never share rows.

use guestlist_sqlx::sqlx::{self, Pool};
use std::time::Duration;

use guestlist_sqlx::{HandlerName, Inbox, MessageId, Retention};

use guestlist_testkit::{Database, Fixture, short_tag};

/// The order every story is about.
pub const ORDER: i64 = 42;

/// A test's pool, inbox and work tables.
pub struct Harness<DB: Fixture> {
    pub pool: Pool<DB>,
    pub inbox: Inbox<DB>,
    /// Where the database is, for child processes.
    pub url: String,
    pub tag: String,
    database: Database<DB>,
}

impl<DB: Fixture> Harness<DB> {
    /// Fresh tables for the test `name`, on the backend's URL (or a new SQLite file).
    pub async fn new(name: &str) -> Self {
        let harness = Self::around(Database::open(32).await, &short_tag(name));
        harness.reset().await;
        harness
    }

    /// Fresh tables for the test `name` on the database at `url` (a server of the test's own).
    pub async fn new_at(url: &str, name: &str) -> Self {
        let harness = Self::around(Database::attach(url, 16).await, &short_tag(name));
        harness.reset().await;
        harness
    }

    /// The tables of test `tag` at `url`, as they are (for a child process).
    pub async fn attach(url: &str, tag: &str, max_connections: u32) -> Self {
        Self::around(Database::attach(url, max_connections).await, tag)
    }

    fn around(database: Database<DB>, tag: &str) -> Self {
        Self {
            pool: database.pool.clone(),
            inbox: Inbox::with_table(&format!("gl_{tag}")).expect("a valid table name"),
            url: database.url.clone(),
            tag: tag.to_owned(),
            database,
        }
    }

    async fn reset(&self) {
        let inbox = self.inbox.table().to_string();
        let dead = format!("{inbox}_dead");
        let steps = format!("{inbox}_steps");
        for table in [inbox, dead, steps, self.orders(), self.picks()] {
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
        self.database.exec(sql).await
    }

    /// Runs a query that returns one integer.
    pub async fn scalar(&self, sql: String) -> i64 {
        self.database.scalar(sql).await
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
    ) -> impl AsyncFnMut(&mut DB::Connection) -> Result<u64, sqlx::Error> + Send + 'static {
        let sql = self.pick_sql(event);
        async move |tx| DB::exec(tx, sql.clone()).await
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

/// A handler name that is known to be valid.
pub fn handler(name: &str) -> HandlerName {
    HandlerName::new(name).expect("a valid handler name")
}

/// A message id that is known to be valid.
pub fn id(value: &str) -> MessageId {
    MessageId::new(value).expect("a valid message id")
}

pub const HOUR: Duration = Duration::from_secs(3600);

pub const DAY: Duration = Duration::from_secs(24 * 3600);

/// A week, declared against Stripe's 72-hour horizon.
pub fn week() -> Retention {
    Retention::new(7 * DAY, 72 * HOUR).expect("a week covers 72 hours")
}

/// Delivers `event` to `handler` once, with the pick work; `true` when the work ran.
pub async fn deliver<DB: Fixture>(
    h: &Harness<DB>,
    handler: &HandlerName,
    event: &MessageId,
) -> bool {
    h.inbox
        .process(&h.pool, handler, event, h.pick(event))
        .await
        .expect("process")
        .ran()
}
