//! The warehouse's `onOrderPaid` handler with guestlist, on an embedded SQLite file.
//!
//! The broker delivers `OrderPaid evt_9f3k` five times (at least once means "maybe more"): the
//! warehouse must set the order to PICKING and create exactly one pick task. Run with
//!
//! ```text
//! cargo run -p guestlist --features sqlite --example on_order_paid
//! ```

use guestlist::sqlx::{self, SqliteConnection, SqlitePool};
use guestlist::{HandlerName, Inbox, MessageId, Processed};

/// The event as the broker hands it over.
struct OrderPaid {
    event_id: &'static str,
    order_id: i64,
}

/// The handler's own work, on the transaction that also holds the claim. The status update is
/// idempotent by shape; the pick task is an append, which is why the inbox is there.
async fn pick(tx: &mut SqliteConnection, order_id: i64) -> Result<(), sqlx::Error> {
    sqlx::query("UPDATE orders SET status = 'PICKING' WHERE id = ?")
        .bind(order_id)
        .execute(&mut *tx)
        .await?;
    sqlx::query("INSERT INTO pick_tasks (order_id) VALUES (?)")
        .bind(order_id)
        .execute(&mut *tx)
        .await?;
    Ok(())
}

/// `onOrderPaid`: claim, work and commit together; then the caller acknowledges.
async fn on_order_paid(
    pool: &SqlitePool,
    inbox: &Inbox<sqlx::Sqlite>,
    event: &OrderPaid,
) -> Result<Processed<()>, Box<dyn std::error::Error>> {
    let warehouse = HandlerName::new("warehouse")?;
    let id = MessageId::new(event.event_id)?;
    let order_id = event.order_id;
    let done = inbox
        .process(pool, &warehouse, &id, async |tx| pick(tx, order_id).await)
        .await?;
    Ok(done)
}

#[tokio::main(flavor = "current_thread")]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let dir = tempfile::tempdir()?;
    let path = dir.path().join("warehouse.db");
    let pool = SqlitePool::connect_with(guestlist::sqlite_options(path.to_str().unwrap())?).await?;
    let inbox = Inbox::<sqlx::Sqlite>::new();
    inbox.migrate(&pool).await?;
    sqlx::raw_sql(
        "CREATE TABLE orders (id INTEGER PRIMARY KEY, status TEXT NOT NULL);
         CREATE TABLE pick_tasks (id INTEGER PRIMARY KEY, order_id INTEGER NOT NULL);
         INSERT INTO orders (id, status) VALUES (42, 'PAID');",
    )
    .execute(&pool)
    .await?;

    let paid = OrderPaid {
        event_id: "evt_9f3k",
        order_id: 42,
    };
    for delivery in 1..=5 {
        let outcome = match on_order_paid(&pool, &inbox, &paid).await? {
            Processed::Ran(()) => "fresh: picked",
            Processed::Duplicate => "duplicate: skipped",
        };
        println!("delivery {delivery} of {}: {outcome}, acked", paid.event_id);
    }
    let tasks: i64 = sqlx::query_scalar("SELECT count(*) FROM pick_tasks")
        .fetch_one(&pool)
        .await?;
    let status: String = sqlx::query_scalar("SELECT status FROM orders WHERE id = 42")
        .fetch_one(&pool)
        .await?;
    println!("five deliveries, five acks, {tasks} pick task; order 42 is {status}");
    assert_eq!(tasks, 1);
    Ok(())
}
