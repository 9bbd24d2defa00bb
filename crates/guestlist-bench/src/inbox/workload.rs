//! The warehouse's work and the hand-written claims, in each backend's SQL.
//!
//! The hand-written claims are what a careful engineer would write with sqlx directly: the same
//! statements guestlist sends, without guestlist around them. The difference between the two is
//! the library's own cost.

use std::future::Future;

use guestlist::Backend;
use guestlist::sqlx::{self, AssertSqlSafe, Pool, QueryBuilder, Transaction};

use crate::work_future::WorkFuture;

/// Orders the events pay for; message `n` pays order `n % ORDERS`.
pub(super) const ORDERS: i64 = 10_000;
pub(super) const ORDERS_TABLE: &str = "bench_orders";
pub(super) const PICKS_TABLE: &str = "bench_pick_tasks";
pub(super) const INBOX_TABLE: &str = "bench_inbox";
pub(super) const HAND_TABLE: &str = "bench_hand_inbox";

/// A backend's SQL for the bench.
pub(super) trait Workload: Backend {
    const LABEL: &'static str;
    /// The order table, the pick tasks, and `ORDERS` paid orders.
    const SETUP: &'static [&'static str];
    /// Sets one order to PICKING.
    const SET_PICKING: &'static str;
    /// Appends one pick task.
    const ADD_PICK: &'static str;
    /// The hand-written single claim.
    const HAND_CLAIM: &'static str;
    /// The statement that empties a table, followed by its name.
    const EMPTY: &'static str = "TRUNCATE TABLE";

    /// Begins the transaction a consumer would (SQLite: `BEGIN IMMEDIATE`, as guestlist does).
    fn begin_tx(
        pool: &Pool<Self>,
    ) -> impl Future<Output = sqlx::Result<Transaction<'static, Self>>> + Send;

    /// The work for one message: the order to PICKING, one pick task.
    fn work_one<'c>(
        conn: &'c mut Self::Connection,
        order: i64,
        event: &'c str,
    ) -> WorkFuture<'c, (), sqlx::Error>;

    /// The work for a batch, set-based: one UPDATE and one INSERT for all of it.
    fn work_batch<'c>(
        conn: &'c mut Self::Connection,
        orders: Vec<i64>,
        events: Vec<&'c str>,
    ) -> WorkFuture<'c, (), sqlx::Error>;

    /// The hand-written claim: `true` when fresh.
    fn hand_claim<'c>(
        conn: &'c mut Self::Connection,
        handler: &'c str,
        id: &'c str,
    ) -> WorkFuture<'c, bool, sqlx::Error>;

    /// The hand-written batch claim of `ids` (sorted): the fresh ones.
    fn hand_claim_batch<'c>(
        conn: &'c mut Self::Connection,
        handler: &'c str,
        ids: &'c [&'c str],
    ) -> WorkFuture<'c, Vec<String>, sqlx::Error>;

    /// Runs one statement outside a transaction.
    fn exec(pool: &Pool<Self>, sql: String) -> impl Future<Output = sqlx::Result<()>> + Send;
}

/// What the three backends share; only types and SQL constants differ.
macro_rules! shared {
    ($conn:ty) => {
        fn work_one<'c>(
            conn: &'c mut $conn,
            order: i64,
            event: &'c str,
        ) -> WorkFuture<'c, (), sqlx::Error> {
            Box::pin(async move {
                sqlx::query(Self::SET_PICKING)
                    .bind(order)
                    .execute(&mut *conn)
                    .await?;
                sqlx::query(Self::ADD_PICK)
                    .bind(order)
                    .bind(event)
                    .execute(&mut *conn)
                    .await?;
                Ok(())
            })
        }

        fn exec(pool: &Pool<Self>, sql: String) -> impl Future<Output = sqlx::Result<()>> + Send {
            async move {
                sqlx::raw_sql(AssertSqlSafe(sql))
                    .execute(pool)
                    .await
                    .map(drop)
            }
        }
    };
}

/// The hand-written claim where `ON CONFLICT DO NOTHING` reports one row for fresh.
macro_rules! hand_claim_by_rows_affected {
    ($conn:ty) => {
        fn hand_claim<'c>(
            conn: &'c mut $conn,
            handler: &'c str,
            id: &'c str,
        ) -> WorkFuture<'c, bool, sqlx::Error> {
            Box::pin(async move {
                let done = sqlx::query(Self::HAND_CLAIM)
                    .bind(handler)
                    .bind(id)
                    .execute(conn)
                    .await?;
                Ok(done.rows_affected() == 1)
            })
        }
    };
}

const PG_SETUP: &[&str] = &[
    "CREATE TABLE IF NOT EXISTS bench_orders (id BIGINT PRIMARY KEY, status TEXT NOT NULL)",
    "CREATE TABLE IF NOT EXISTS bench_pick_tasks (id BIGSERIAL PRIMARY KEY, order_id BIGINT NOT NULL, event TEXT NOT NULL)",
    "INSERT INTO bench_orders SELECT i, 'PAID' FROM generate_series(0, 9999) AS i ON CONFLICT DO NOTHING",
];

impl Workload for sqlx::Postgres {
    const LABEL: &'static str = "postgres";
    const SETUP: &'static [&'static str] = PG_SETUP;
    const SET_PICKING: &'static str = "UPDATE bench_orders SET status = 'PICKING' WHERE id = $1";
    const ADD_PICK: &'static str = "INSERT INTO bench_pick_tasks (order_id, event) VALUES ($1, $2)";
    const HAND_CLAIM: &'static str =
        "INSERT INTO bench_hand_inbox (handler, message_id) VALUES ($1, $2) ON CONFLICT DO NOTHING";

    shared!(sqlx::PgConnection);

    fn begin_tx(
        pool: &Pool<Self>,
    ) -> impl Future<Output = sqlx::Result<Transaction<'static, Self>>> + Send {
        pool.begin()
    }

    fn work_batch<'c>(
        conn: &'c mut sqlx::PgConnection,
        orders: Vec<i64>,
        events: Vec<&'c str>,
    ) -> WorkFuture<'c, (), sqlx::Error> {
        Box::pin(async move {
            sqlx::query("UPDATE bench_orders SET status = 'PICKING' WHERE id = ANY($1)")
                .bind(&orders)
                .execute(&mut *conn)
                .await?;
            sqlx::query(
                "INSERT INTO bench_pick_tasks (order_id, event) SELECT * FROM unnest($1::bigint[], $2::text[])",
            )
            .bind(&orders)
            .bind(&events)
            .execute(&mut *conn)
            .await?;
            Ok(())
        })
    }

    hand_claim_by_rows_affected!(sqlx::PgConnection);

    fn hand_claim_batch<'c>(
        conn: &'c mut sqlx::PgConnection,
        handler: &'c str,
        ids: &'c [&'c str],
    ) -> WorkFuture<'c, Vec<String>, sqlx::Error> {
        Box::pin(
            sqlx::query_scalar(
                "INSERT INTO bench_hand_inbox (handler, message_id) SELECT $1, id FROM unnest($2::text[]) AS b(id) \
                 ON CONFLICT DO NOTHING RETURNING message_id",
            )
            .bind(handler)
            .bind(ids)
            .fetch_all(conn),
        )
    }
}

const SQLITE_SETUP: &[&str] = &[
    "CREATE TABLE IF NOT EXISTS bench_orders (id INTEGER PRIMARY KEY, status TEXT NOT NULL)",
    "CREATE TABLE IF NOT EXISTS bench_pick_tasks (id INTEGER PRIMARY KEY, order_id INTEGER NOT NULL, event TEXT NOT NULL)",
    "WITH RECURSIVE s(i) AS (SELECT 0 UNION ALL SELECT i + 1 FROM s WHERE i < 9999) \
     INSERT OR IGNORE INTO bench_orders SELECT i, 'PAID' FROM s",
];

impl Workload for sqlx::Sqlite {
    const LABEL: &'static str = "sqlite";
    const EMPTY: &'static str = "DELETE FROM";
    const SETUP: &'static [&'static str] = SQLITE_SETUP;
    const SET_PICKING: &'static str = "UPDATE bench_orders SET status = 'PICKING' WHERE id = ?1";
    const ADD_PICK: &'static str = "INSERT INTO bench_pick_tasks (order_id, event) VALUES (?1, ?2)";
    const HAND_CLAIM: &'static str =
        "INSERT INTO bench_hand_inbox (handler, message_id) VALUES (?1, ?2) ON CONFLICT DO NOTHING";

    shared!(sqlx::SqliteConnection);

    fn begin_tx(
        pool: &Pool<Self>,
    ) -> impl Future<Output = sqlx::Result<Transaction<'static, Self>>> + Send {
        pool.begin_with("BEGIN IMMEDIATE")
    }

    fn work_batch<'c>(
        conn: &'c mut sqlx::SqliteConnection,
        orders: Vec<i64>,
        events: Vec<&'c str>,
    ) -> WorkFuture<'c, (), sqlx::Error> {
        Box::pin(async move {
            let orders = serde_json::to_string(&orders).expect("numbers serialize");
            let events = serde_json::to_string(&events).expect("strings serialize");
            sqlx::query(
                "UPDATE bench_orders SET status = 'PICKING' WHERE id IN (SELECT value FROM json_each(?1))",
            )
            .bind(&orders)
            .execute(&mut *conn)
            .await?;
            sqlx::query(
                "INSERT INTO bench_pick_tasks (order_id, event) SELECT o.value, e.value \
                 FROM json_each(?1) AS o JOIN json_each(?2) AS e ON o.key = e.key",
            )
            .bind(&orders)
            .bind(&events)
            .execute(&mut *conn)
            .await?;
            Ok(())
        })
    }

    hand_claim_by_rows_affected!(sqlx::SqliteConnection);

    fn hand_claim_batch<'c>(
        conn: &'c mut sqlx::SqliteConnection,
        handler: &'c str,
        ids: &'c [&'c str],
    ) -> WorkFuture<'c, Vec<String>, sqlx::Error> {
        Box::pin(async move {
            let ids = serde_json::to_string(ids).expect("strings serialize");
            sqlx::query_scalar(
                "INSERT INTO bench_hand_inbox (handler, message_id) SELECT ?1, value FROM json_each(?2) WHERE true \
                 ON CONFLICT DO NOTHING RETURNING message_id",
            )
            .bind(handler)
            .bind(ids)
            .fetch_all(conn)
            .await
        })
    }
}

const MYSQL_SETUP: &[&str] = &[
    "CREATE TABLE IF NOT EXISTS bench_orders (id BIGINT PRIMARY KEY, status VARCHAR(16) NOT NULL)",
    "CREATE TABLE IF NOT EXISTS bench_pick_tasks (id BIGINT AUTO_INCREMENT PRIMARY KEY, order_id BIGINT NOT NULL, event VARBINARY(255) NOT NULL)",
    "SET SESSION max_recursive_iterations = 20000",
    "INSERT IGNORE INTO bench_orders WITH RECURSIVE s(i) AS (SELECT 0 UNION ALL SELECT i + 1 FROM s WHERE i < 9999) \
     SELECT i, 'PAID' FROM s",
];

impl Workload for sqlx::MySql {
    const LABEL: &'static str = "mysql";
    const SETUP: &'static [&'static str] = MYSQL_SETUP;
    const SET_PICKING: &'static str = "UPDATE bench_orders SET status = 'PICKING' WHERE id = ?";
    const ADD_PICK: &'static str = "INSERT INTO bench_pick_tasks (order_id, event) VALUES (?, ?)";
    const HAND_CLAIM: &'static str =
        "INSERT INTO bench_hand_inbox (handler, message_id) VALUES (?, ?)";

    shared!(sqlx::MySqlConnection);

    fn begin_tx(
        pool: &Pool<Self>,
    ) -> impl Future<Output = sqlx::Result<Transaction<'static, Self>>> + Send {
        pool.begin()
    }

    fn work_batch<'c>(
        conn: &'c mut sqlx::MySqlConnection,
        orders: Vec<i64>,
        events: Vec<&'c str>,
    ) -> WorkFuture<'c, (), sqlx::Error> {
        Box::pin(async move {
            let mut update =
                QueryBuilder::new("UPDATE bench_orders SET status = 'PICKING' WHERE id IN (");
            let mut ids = update.separated(", ");
            for order in &orders {
                ids.push_bind(*order);
            }
            update.push(")");
            update.build().execute(&mut *conn).await?;
            let mut insert = QueryBuilder::new("INSERT INTO bench_pick_tasks (order_id, event) ");
            insert.push_values(orders.iter().zip(&events), |mut row, (order, event)| {
                row.push_bind(*order).push_bind(*event);
            });
            insert.build().execute(&mut *conn).await?;
            Ok(())
        })
    }

    fn hand_claim<'c>(
        conn: &'c mut sqlx::MySqlConnection,
        handler: &'c str,
        id: &'c str,
    ) -> WorkFuture<'c, bool, sqlx::Error> {
        Box::pin(async move {
            match sqlx::query(Self::HAND_CLAIM)
                .bind(handler)
                .bind(id)
                .execute(conn)
                .await
            {
                Ok(_) => Ok(true),
                Err(err)
                    if err
                        .as_database_error()
                        .is_some_and(|e| e.is_unique_violation()) =>
                {
                    Ok(false)
                }
                Err(err) => Err(err),
            }
        })
    }

    fn hand_claim_batch<'c>(
        conn: &'c mut sqlx::MySqlConnection,
        handler: &'c str,
        ids: &'c [&'c str],
    ) -> WorkFuture<'c, Vec<String>, sqlx::Error> {
        Box::pin(async move {
            let mut fresh = Vec::new();
            for id in ids {
                if Self::hand_claim(&mut *conn, handler, id).await? {
                    fresh.push((*id).to_owned());
                }
            }
            Ok(fresh)
        })
    }
}
