//! The demo's warehouse: an `orders` table, a `pick_tasks` table, and the `onOrderPaid` work.

use std::future::Future;

use guestlist::sqlx::{self, AssertSqlSafe, Pool};
use guestlist::{Backend, Inbox, MessageId, Schema};

/// The demo's tables; the demo drops and recreates them.
pub(super) const INBOX: &str = "guestlist_demo_inbox";
const ORDERS: &str = "guestlist_demo_orders";
const PICK_TASKS: &str = "guestlist_demo_pick_tasks";

/// The order every event pays for.
const ORDER: i64 = 42;

/// Runs one or more statements on `conn`: written once, generically, through
/// [`Backend::executor`].
pub(crate) async fn exec<DB: Backend>(
    conn: &mut DB::Connection,
    sql: String,
) -> Result<u64, sqlx::Error> {
    let done = sqlx::raw_sql(AssertSqlSafe(sql))
        .execute(DB::executor(conn))
        .await?;
    Ok(DB::rows_affected(&done))
}

/// The one query whose result type differs in its bounds on each backend.
pub(crate) trait Shop: Backend {
    /// Runs a query returning one integer.
    fn count(
        pool: &Pool<Self>,
        sql: String,
    ) -> impl Future<Output = Result<i64, sqlx::Error>> + Send;
}

macro_rules! shop {
    ($db:ty) => {
        impl Shop for $db {
            async fn count(pool: &Pool<Self>, sql: String) -> Result<i64, sqlx::Error> {
                sqlx::query_scalar(AssertSqlSafe(sql)).fetch_one(pool).await
            }
        }
    };
}
shop!(sqlx::Postgres);
shop!(sqlx::Sqlite);
shop!(sqlx::MySql);

/// Drops and recreates the demo's tables, with order 42 paid and waiting.
pub(super) async fn open<DB: Shop>(pool: &Pool<DB>) -> anyhow::Result<Inbox<DB>> {
    // Under the lock every schema step takes, like any other process's.
    Schema::new([
        format!("DROP TABLE IF EXISTS {INBOX}"),
        format!("DROP TABLE IF EXISTS {ORDERS}"),
        format!("DROP TABLE IF EXISTS {PICK_TASKS}"),
        format!("CREATE TABLE {ORDERS} (id BIGINT PRIMARY KEY, status VARCHAR(16) NOT NULL)"),
        format!(
            "CREATE TABLE {PICK_TASKS} (order_id BIGINT NOT NULL, event VARCHAR(255) NOT NULL)"
        ),
    ])
    .migrate(pool)
    .await?;
    let inbox = Inbox::<DB>::with_table(INBOX)?;
    inbox.migrate(pool).await?;
    let mut conn = pool.acquire().await?;
    exec::<DB>(
        &mut conn,
        format!("INSERT INTO {ORDERS} (id, status) VALUES ({ORDER}, 'PAID')"),
    )
    .await?;
    Ok(inbox)
}

/// `onOrderPaid`'s work for `event`: the order goes to PICKING (idempotent by shape) and a pick
/// task is appended (not idempotent: the reason for the inbox).
pub(super) async fn pick<DB: Backend>(
    tx: &mut DB::Connection,
    event: &MessageId,
) -> Result<u64, sqlx::Error> {
    let sql = format!(
        "UPDATE {ORDERS} SET status = 'PICKING' WHERE id = {ORDER}; \
         INSERT INTO {PICK_TASKS} (order_id, event) VALUES ({ORDER}, '{event}')"
    );
    exec::<DB>(tx, sql).await
}

/// Pick tasks created for `event`, or for every event.
pub(super) async fn pick_tasks<DB: Shop>(
    pool: &Pool<DB>,
    event: Option<&MessageId>,
) -> anyhow::Result<i64> {
    let filter = event
        .map(|e| format!(" WHERE event = '{e}'"))
        .unwrap_or_default();
    Ok(DB::count(pool, format!("SELECT count(*) FROM {PICK_TASKS}{filter}")).await?)
}
