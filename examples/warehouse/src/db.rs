//! The example's SQL, once for PostgreSQL and SQLite (both take `$1` placeholders).

use std::future::Future;
use std::pin::Pin;

use guestlist::sqlx::{self, Pool};
use guestlist::{Backend, Schema};

/// What the example's statements return: a future that borrows the connection for `'c`.
pub type WorkFuture<'c, T, E> = Pin<Box<dyn Future<Output = Result<T, E>> + Send + 'c>>;

/// The tables and statements of the example, on one database.
pub trait Shop: Backend {
    /// Creates the example's tables if they are missing, taking turns with every other
    /// instance that starts at the same moment (see [`Schema`]).
    fn create_tables(pool: &Pool<Self>) -> WorkFuture<'_, (), guestlist::Error>;
    /// A charge row; its id.
    fn insert_charge(
        conn: &mut Self::Connection,
        order: i64,
        amount: i64,
    ) -> WorkFuture<'_, i64, sqlx::Error>;
    /// An order, NEW; its id.
    fn insert_order(conn: &mut Self::Connection, amount: i64) -> WorkFuture<'_, i64, sqlx::Error>;
    /// The order goes to PICKING (idempotent by shape).
    fn set_picking(conn: &mut Self::Connection, order: i64) -> WorkFuture<'_, (), sqlx::Error>;
    /// A pick task for the order, with the charge that paid for it (an append: the inbox's job).
    fn add_pick_task<'c>(
        conn: &'c mut Self::Connection,
        order: i64,
        event: &'c str,
        charge: &'c str,
    ) -> WorkFuture<'c, (), sqlx::Error>;
    /// The stock held for the order, by the OrderPaid event that reserved it (an append: the
    /// steps' journal makes it exactly once).
    fn reserve<'c>(
        conn: &'c mut Self::Connection,
        order: i64,
        event: &'c str,
    ) -> WorkFuture<'c, (), sqlx::Error>;
    /// The customer's next arrival: how many of its orders the warehouse has handled, this one
    /// included, with `how` (which process, which delivery). The customer's row is locked until
    /// the transaction ends, so that the count is the order in which the handlers of one
    /// customer's orders committed.
    fn record_arrival<'c>(
        conn: &'c mut Self::Connection,
        customer: &'c str,
        order: i64,
        how: &'c str,
    ) -> WorkFuture<'c, i64, sqlx::Error>;
}

const TABLES: [&str; 6] = [
    "CREATE TABLE IF NOT EXISTS charges (id INTEGER PRIMARY KEY, order_id BIGINT NOT NULL, amount BIGINT NOT NULL)",
    "CREATE TABLE IF NOT EXISTS orders (id INTEGER PRIMARY KEY, amount BIGINT NOT NULL, status VARCHAR(16) NOT NULL)",
    "CREATE TABLE IF NOT EXISTS pick_tasks (order_id BIGINT NOT NULL, event VARCHAR(255) NOT NULL, charge VARCHAR(64) NOT NULL)",
    "CREATE TABLE IF NOT EXISTS reservations (order_id BIGINT NOT NULL, event VARCHAR(255) NOT NULL)",
    "CREATE TABLE IF NOT EXISTS customers (id VARCHAR(64) PRIMARY KEY, handled BIGINT NOT NULL)",
    "CREATE TABLE IF NOT EXISTS arrivals (customer VARCHAR(64) NOT NULL, order_id BIGINT NOT NULL, rank BIGINT NOT NULL, how VARCHAR(255) NOT NULL)",
];

macro_rules! shop {
    ($db:ty, $conn:ty, $id:literal) => {
        impl Shop for $db {
            fn create_tables(pool: &Pool<Self>) -> WorkFuture<'_, (), guestlist::Error> {
                // Both services create every table: one Schema, so that they take turns.
                let tables = TABLES.map(|table| table.replace("INTEGER PRIMARY KEY", $id));
                Box::pin(async move { Schema::new(tables).migrate(pool).await })
            }

            fn insert_charge(
                conn: &mut $conn,
                order: i64,
                amount: i64,
            ) -> WorkFuture<'_, i64, sqlx::Error> {
                Box::pin(
                    sqlx::query_scalar(
                        "INSERT INTO charges (order_id, amount) VALUES ($1, $2) RETURNING id",
                    )
                    .bind(order)
                    .bind(amount)
                    .fetch_one(conn),
                )
            }

            fn insert_order(conn: &mut $conn, amount: i64) -> WorkFuture<'_, i64, sqlx::Error> {
                Box::pin(
                    sqlx::query_scalar(
                        "INSERT INTO orders (amount, status) VALUES ($1, 'NEW') RETURNING id",
                    )
                    .bind(amount)
                    .fetch_one(conn),
                )
            }

            fn set_picking(conn: &mut $conn, order: i64) -> WorkFuture<'_, (), sqlx::Error> {
                Box::pin(async move {
                    sqlx::query("UPDATE orders SET status = 'PICKING' WHERE id = $1")
                        .bind(order)
                        .execute(conn)
                        .await
                        .map(drop)
                })
            }

            fn add_pick_task<'c>(
                conn: &'c mut $conn,
                order: i64,
                event: &'c str,
                charge: &'c str,
            ) -> WorkFuture<'c, (), sqlx::Error> {
                Box::pin(async move {
                    sqlx::query(
                        "INSERT INTO pick_tasks (order_id, event, charge) VALUES ($1, $2, $3)",
                    )
                    .bind(order)
                    .bind(event)
                    .bind(charge)
                    .execute(conn)
                    .await
                    .map(drop)
                })
            }

            fn reserve<'c>(
                conn: &'c mut $conn,
                order: i64,
                event: &'c str,
            ) -> WorkFuture<'c, (), sqlx::Error> {
                Box::pin(async move {
                    sqlx::query("INSERT INTO reservations (order_id, event) VALUES ($1, $2)")
                        .bind(order)
                        .bind(event)
                        .execute(conn)
                        .await
                        .map(drop)
                })
            }

            fn record_arrival<'c>(
                conn: &'c mut $conn,
                customer: &'c str,
                order: i64,
                how: &'c str,
            ) -> WorkFuture<'c, i64, sqlx::Error> {
                Box::pin(async move {
                    let rank: i64 = sqlx::query_scalar(
                        "INSERT INTO customers (id, handled) VALUES ($1, 1) ON CONFLICT (id) \
                         DO UPDATE SET handled = customers.handled + 1 RETURNING handled",
                    )
                    .bind(customer)
                    .fetch_one(&mut *conn)
                    .await?;
                    sqlx::query(
                        "INSERT INTO arrivals (customer, order_id, rank, how) \
                         VALUES ($1, $2, $3, $4)",
                    )
                    .bind(customer)
                    .bind(order)
                    .bind(rank)
                    .bind(how)
                    .execute(conn)
                    .await?;
                    Ok(rank)
                })
            }
        }
    };
}

shop!(sqlx::Postgres, sqlx::PgConnection, "BIGSERIAL PRIMARY KEY");
shop!(sqlx::Sqlite, sqlx::SqliteConnection, "INTEGER PRIMARY KEY");

/// Connects to PostgreSQL (`postgres://…`) or SQLite (`sqlite:path`) and runs `$body` with
/// `$pool` bound to the pool.
#[macro_export]
macro_rules! with_pool {
    ($url:expr, |$pool:ident| $body:expr) => {{
        let url: &str = $url;
        if url.starts_with("postgres") {
            let $pool = guestlist::sqlx::PgPool::connect(url).await?;
            $body
        } else {
            let $pool = guestlist::sqlx::pool::PoolOptions::<guestlist::sqlx::Sqlite>::new()
                .max_connections(4)
                .connect_with(guestlist::sqlite_options(url)?)
                .await?;
            $body
        }
    }};
}
