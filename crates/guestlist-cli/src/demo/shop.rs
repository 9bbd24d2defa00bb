//! The demo's warehouse: an `orders` table, a `pick_tasks` table, and the `onOrderPaid` work.

use std::future::Future;

use guestlist::sqlx::{self, AssertSqlSafe, Pool};
use guestlist::{Backend, Inbox, MessageId, Schema, WorkFuture};

/// The demo's tables; the demo drops and recreates them.
pub(super) const INBOX: &str = "guestlist_demo_inbox";
const ORDERS: &str = "guestlist_demo_orders";
const PICK_TASKS: &str = "guestlist_demo_pick_tasks";

/// The order every event pays for.
const ORDER: i64 = 42;

/// The two kinds of SQL the demo runs, on each backend.
pub(crate) trait Shop: Backend {
    /// Runs one or more statements on `conn`.
    fn exec(conn: &mut Self::Connection, sql: String) -> WorkFuture<'_, u64, sqlx::Error>;
    /// Runs a query returning one integer.
    fn count(
        pool: &Pool<Self>,
        sql: String,
    ) -> impl Future<Output = Result<i64, sqlx::Error>> + Send;
}

macro_rules! shop {
    ($db:ty, $conn:ty) => {
        impl Shop for $db {
            fn exec(conn: &mut $conn, sql: String) -> WorkFuture<'_, u64, sqlx::Error> {
                Box::pin(async move {
                    Ok(sqlx::raw_sql(AssertSqlSafe(sql))
                        .execute(conn)
                        .await?
                        .rows_affected())
                })
            }

            async fn count(pool: &Pool<Self>, sql: String) -> Result<i64, sqlx::Error> {
                sqlx::query_scalar(AssertSqlSafe(sql)).fetch_one(pool).await
            }
        }
    };
}
shop!(sqlx::Postgres, sqlx::PgConnection);
shop!(sqlx::Sqlite, sqlx::SqliteConnection);
shop!(sqlx::MySql, sqlx::MySqlConnection);

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
    DB::exec(
        &mut conn,
        format!("INSERT INTO {ORDERS} (id, status) VALUES ({ORDER}, 'PAID')"),
    )
    .await?;
    Ok(inbox)
}

/// `onOrderPaid`'s work for `event`: the order goes to PICKING (idempotent by shape) and a pick
/// task is appended (not idempotent: the reason for the inbox).
pub(super) fn pick<DB: Shop>(
    event: &MessageId,
) -> impl for<'c> FnMut(&'c mut DB::Connection) -> WorkFuture<'c, u64, sqlx::Error> + Send + use<DB>
{
    let sql = format!(
        "UPDATE {ORDERS} SET status = 'PICKING' WHERE id = {ORDER}; \
         INSERT INTO {PICK_TASKS} (order_id, event) VALUES ({ORDER}, '{event}')"
    );
    move |tx| DB::exec(tx, sql.clone())
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
