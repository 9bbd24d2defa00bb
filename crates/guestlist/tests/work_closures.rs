//! Work as async closures, where users put it: on a spawned task (its future must be `Send`),
//! borrowing the caller's state, and as a consumer's handler. Runs on SQLite files; the
//! consumer's case is checked by the compiler alone.

use std::sync::Arc;

use guestlist::sqlx::{self, Sqlite, SqlitePool};
use guestlist::{HandlerName, Inbox, MessageId};
use guestlist_consumer::{Consumer, IdFrom, Source};

/// What an application shares between its handlers.
struct Warehouse {
    picks: String,
}

async fn setup() -> (tempfile::TempDir, SqlitePool, Inbox<Sqlite>) {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("work.db");
    let pool = SqlitePool::connect_with(guestlist::sqlite_options(path.to_str().unwrap()).unwrap())
        .await
        .unwrap();
    let inbox = Inbox::<Sqlite>::new();
    inbox.migrate(&pool).await.unwrap();
    sqlx::query("CREATE TABLE picks (event TEXT NOT NULL)")
        .execute(&pool)
        .await
        .unwrap();
    (dir, pool, inbox)
}

async fn picks(pool: &SqlitePool) -> i64 {
    sqlx::query_scalar("SELECT count(*) FROM picks")
        .fetch_one(pool)
        .await
        .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn work_on_spawned_tasks_owns_what_it_captures() {
    let (_dir, pool, inbox) = setup().await;
    let warehouse = Arc::new(Warehouse {
        picks: "picks".into(),
    });
    let handler = HandlerName::new("warehouse").unwrap();
    let event = MessageId::new("evt_9f3k").unwrap();
    // Four deliveries of one event on four tasks: each future must be Send, and the closure
    // owns an Arc of the shared state; its future borrows from it without a clone per call.
    let tasks: Vec<_> = (0..4)
        .map(|_| {
            let (pool, inbox, handler, event) =
                (pool.clone(), inbox.clone(), handler.clone(), event.clone());
            let (warehouse, id) = (warehouse.clone(), event.to_string());
            tokio::spawn(async move {
                inbox
                    .process(&pool, &handler, &event, async move |tx| {
                        let insert = format!("INSERT INTO {} (event) VALUES (?)", warehouse.picks);
                        sqlx::query(sqlx::AssertSqlSafe(insert))
                            .bind(&id)
                            .execute(&mut *tx)
                            .await
                    })
                    .await
            })
        })
        .collect();
    let mut ran = 0;
    for task in tasks {
        ran += u32::from(task.await.unwrap().unwrap().ran());
    }
    assert_eq!(
        (ran, picks(&pool).await),
        (1, 1),
        "four deliveries, one pick task"
    );
}

#[tokio::test]
async fn work_borrows_the_callers_state() {
    let (_dir, pool, inbox) = setup().await;
    let warehouse = Warehouse {
        picks: "picks".into(),
    };
    let handler = HandlerName::new("warehouse").unwrap();
    let mut seen = Vec::new(); // borrowed mutably by the work: AsyncFnMut
    for delivery in ["evt_a", "evt_b", "evt_a"] {
        let event = MessageId::new(delivery).unwrap();
        let done = inbox
            .process(&pool, &handler, &event, async |tx| {
                seen.push(event.to_string());
                let insert = format!("INSERT INTO {} (event) VALUES (?)", warehouse.picks);
                sqlx::query(sqlx::AssertSqlSafe(insert))
                    .bind(event.as_str())
                    .execute(&mut *tx)
                    .await
            })
            .await
            .unwrap();
        assert_eq!(done.ran(), delivery != "evt_a" || seen.len() == 1);
    }
    assert_eq!(
        seen,
        ["evt_a", "evt_b"],
        "the work ran for fresh events only"
    );
    assert_eq!(picks(&pool).await, 2);
}

/// Compiles only if a consumer whose handler is an async closure over shared state can be
/// spawned: its `run` future is `Send`.
#[allow(dead_code)]
fn a_consumer_with_an_async_closure_can_be_spawned<S: Source>(source: S, pool: SqlitePool) {
    let warehouse = Arc::new(Warehouse {
        picks: "picks".into(),
    });
    let consumer = Consumer::new(
        source,
        pool,
        Inbox::<Sqlite>::new(),
        HandlerName::new("warehouse").unwrap(),
        IdFrom::BrokerId,
        async move |tx, message| {
            let insert = format!("INSERT INTO {} (event) VALUES (?)", warehouse.picks);
            sqlx::query(sqlx::AssertSqlSafe(insert))
                .bind(message.id.as_str())
                .execute(&mut *tx)
                .await
                .map(drop)
        },
    );
    drop(tokio::spawn(consumer.run(std::future::pending())));
}
