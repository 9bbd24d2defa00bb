//! The design's sequence, for real: the warehouse charges, is killed with SIGKILL before its
//! commit, the broker redelivers, the warehouse charges again with the same carried key, and
//! payments replays the same charge: one charge row, one pick task that records it.
//!
//! Every part is real: the `warehouse` binary as a child process, NATS JetStream or RabbitMQ,
//! payments behind the Idempotency-Key layer, SQLite files or a PostgreSQL database.

#![allow(unreachable_pub)] // a test crate has no public API

use std::process::Stdio;
use std::time::Duration;

use guestlist_testkit::{Database, Fixture, short_tag};
use tokio::io::{AsyncBufReadExt, BufReader, Lines};
use tokio::process::{Child, ChildStdout, Command};
use warehouse_example::broker::Orders;
use warehouse_example::db::Shop;
use warehouse_example::warehouse::{CHARGED, HANG_AFTER_CHARGE, OrderPaid};

const PATIENCE: Duration = Duration::from_secs(60);

/// The warehouse binary, running, with its standard output read line by line.
struct Warehouse {
    child: Child,
    lines: Lines<BufReader<ChildStdout>>,
    api: String,
}

impl Warehouse {
    async fn start(database: &str, orders: &Orders, payments: &str, hang: bool) -> Self {
        let mut command = Command::new(env!("CARGO_BIN_EXE_warehouse"));
        command
            .args([
                "--database",
                database,
                "--broker",
                &orders.url,
                "--queue",
                &orders.name,
            ])
            .args([
                "--payments",
                payments,
                "--listen",
                "127.0.0.1:0",
                "--ack-wait",
                "2s",
            ])
            .env("RUST_LOG", "warn")
            .stdout(Stdio::piped())
            .kill_on_drop(true);
        if hang {
            command.env(HANG_AFTER_CHARGE, "1");
        }
        let mut child = command.spawn().expect("start the warehouse binary");
        let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
        let api = next_line(&mut lines, "warehouse API on ").await;
        Self { child, lines, api }
    }

    /// Waits for the line the hanging handler prints; the charge id in it.
    async fn charged(&mut self) -> String {
        next_line(&mut self.lines, CHARGED).await.trim().to_owned()
    }

    async fn sigkill(mut self) {
        self.child.kill().await.expect("SIGKILL the warehouse");
    }

    async fn sigterm(mut self) {
        let pid = self.child.id().expect("running").to_string();
        let status = std::process::Command::new("kill")
            .args(["-TERM", &pid])
            .status()
            .expect("kill -TERM");
        assert!(status.success());
        let exit = tokio::time::timeout(PATIENCE, self.child.wait())
            .await
            .expect("the warehouse stops on SIGTERM")
            .unwrap();
        assert!(
            exit.success(),
            "the warehouse exits cleanly on SIGTERM: {exit}"
        );
    }
}

/// The rest of the first line of `lines` that starts with `prefix`.
async fn next_line(lines: &mut Lines<BufReader<ChildStdout>>, prefix: &str) -> String {
    let read = async {
        while let Some(line) = lines
            .next_line()
            .await
            .expect("read the warehouse's output")
        {
            if let Some(rest) = line.strip_prefix(prefix) {
                return rest.to_owned();
            }
        }
        panic!("the warehouse exited before printing {prefix:?} (its log is above)")
    };
    tokio::time::timeout(PATIENCE, read)
        .await
        .unwrap_or_else(|_| panic!("the warehouse printed no {prefix:?} within {PATIENCE:?}"))
}

/// Waits until `sql` counts `want`.
async fn eventually<DB: Fixture>(db: &Database<DB>, sql: &str, want: i64) {
    let deadline = tokio::time::Instant::now() + PATIENCE;
    loop {
        let got = db.scalar(sql.to_owned()).await;
        if got == want {
            return;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "{sql}: {got} after {PATIENCE:?}, want {want}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// Payments, in this process, on `pool`; its base URL.
async fn start_payments<DB: Shop>(pool: guestlist::sqlx::Pool<DB>) -> String {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    let app = warehouse_example::payments::router(pool).await.unwrap();
    tokio::spawn(async move { axum::serve(listener, app).await });
    url
}

async fn count<DB: Fixture>(db: &Database<DB>, sql: &str) -> i64 {
    db.scalar(sql.to_owned()).await
}

/// The whole sequence. `warehouse_db` and `payments_db` may be one database.
async fn charge_crash_redeliver<DB: Fixture + Shop>(
    orders: Orders,
    warehouse_db: Database<DB>,
    payments_db: Database<DB>,
) {
    let payments = start_payments(payments_db.pool.clone()).await;
    let client = reqwest::Client::new();

    // A first warehouse that will hang after it charges, before it commits.
    let mut first = Warehouse::start(&warehouse_db.url, &orders, &payments, true).await;

    // The warehouse's own API: "create order", retried with one key, creates one order.
    let mut ids = Vec::new();
    for attempt in 0..2 {
        let response = client
            .post(format!("{}/orders", first.api))
            .header("idempotency-key", "order-1")
            .header("authorization", "Bearer shop-frontend")
            .json(&serde_json::json!({ "amount": 1200 }))
            .send()
            .await
            .unwrap();
        assert_eq!(response.status(), 201, "attempt {attempt}");
        assert_eq!(
            response.headers().contains_key("idempotent-replayed"),
            attempt == 1,
            "the retry is the replay"
        );
        let order: serde_json::Value = response.json().await.unwrap();
        ids.push(order["id"].as_i64().unwrap());
    }
    assert_eq!(ids[0], ids[1], "a retried create returns the same order");
    let order = ids[0];
    assert_eq!(count(&warehouse_db, "SELECT COUNT(*) FROM orders").await, 1);

    let paid = OrderPaid {
        id: "evt_9f3k".into(),
        order,
        amount: 1200,
    };
    orders.publish(&paid).await.unwrap();

    // Charge, then SIGKILL before the commit.
    let charge = first.charged().await;
    assert!(charge.starts_with("ch_"), "a charge id: {charge}");
    first.sigkill().await;
    assert_eq!(count(&payments_db, "SELECT COUNT(*) FROM charges").await, 1);
    assert_eq!(
        count(&warehouse_db, "SELECT COUNT(*) FROM pick_tasks").await,
        0,
        "the killed handler's pick task rolled back"
    );
    assert_eq!(
        count(
            &warehouse_db,
            "SELECT COUNT(*) FROM orders WHERE status = 'NEW'"
        )
        .await,
        1,
        "the killed handler's PICKING rolled back"
    );

    // The redelivery, to a warehouse that runs to the end: it charges again with the same key,
    // payments replays the same charge, and the pick task records it.
    let second = Warehouse::start(&warehouse_db.url, &orders, &payments, false).await;
    eventually(&warehouse_db, "SELECT COUNT(*) FROM pick_tasks", 1).await;
    let same_charge = format!("SELECT COUNT(*) FROM pick_tasks WHERE charge = '{charge}'");
    assert_eq!(
        count(&warehouse_db, &same_charge).await,
        1,
        "the redelivery got the same charge id back"
    );
    assert_eq!(
        count(&payments_db, "SELECT COUNT(*) FROM charges").await,
        1,
        "one charge row in payments"
    );
    assert_eq!(
        count(
            &warehouse_db,
            "SELECT COUNT(*) FROM orders WHERE status = 'PICKING'"
        )
        .await,
        1
    );

    // The broker delivers evt_9f3k once more, then a second event: the duplicate does nothing,
    // the second event gets a charge of its own (its own key).
    orders.publish(&paid).await.unwrap();
    orders
        .publish(&OrderPaid {
            id: "evt_2".into(),
            order,
            amount: 300,
        })
        .await
        .unwrap();
    eventually(&warehouse_db, "SELECT COUNT(*) FROM pick_tasks", 2).await;
    second.sigterm().await;
    assert_eq!(
        count(
            &warehouse_db,
            "SELECT COUNT(*) FROM pick_tasks WHERE event = 'evt_9f3k'"
        )
        .await,
        1,
        "the duplicate made no second pick task"
    );
    assert_eq!(
        count(&payments_db, "SELECT COUNT(*) FROM charges").await,
        2,
        "one charge per event"
    );
    assert_eq!(
        count(&payments_db, "SELECT COUNT(*) FROM payments_keys").await,
        2,
        "one stored charge response per event"
    );
}

/// A fresh SQLite file in `dir`.
async fn sqlite_file(dir: &tempfile::TempDir, name: &str) -> Database<guestlist::sqlx::Sqlite> {
    let path = dir.path().join(name);
    Database::attach(path.to_str().unwrap(), 2).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn charge_sigkill_redelivery_same_charge_nats_sqlite() {
    let nats = std::env::var("GUESTLIST_TEST_NATS_URL")
        .unwrap_or_else(|_| "nats://127.0.0.1:4222".to_owned());
    let orders = Orders::new(
        nats,
        format!("WH_{}", short_tag("nats_sqlite").to_uppercase()),
    );
    orders.remove().await.unwrap();
    let dir = tempfile::tempdir().unwrap();
    let warehouse = sqlite_file(&dir, "warehouse.db").await;
    let payments = sqlite_file(&dir, "payments.db").await;
    charge_crash_redeliver(orders.clone(), warehouse, payments).await;
    orders.remove().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn charge_sigkill_redelivery_same_charge_rabbitmq_postgres() {
    let amqp = std::env::var("GUESTLIST_TEST_AMQP_URL")
        .unwrap_or_else(|_| "amqp://guest:guest@127.0.0.1:5672/%2f".to_owned());
    let orders = Orders::new(amqp, "wh_rabbitmq_postgres");
    orders.remove().await.unwrap();
    // A database of its own: the example's tables have fixed names.
    let database = fresh_postgres_database("guestlist_warehouse_example").await;
    let payments = Database::<guestlist::sqlx::Postgres>::attach(&database, 2).await;
    let warehouse = Database::<guestlist::sqlx::Postgres>::attach(&database, 2).await;
    charge_crash_redeliver(orders.clone(), warehouse, payments).await;
    orders.remove().await.unwrap();
}

/// Drops and creates the PostgreSQL database `name` beside the test database; its URL.
async fn fresh_postgres_database(name: &str) -> String {
    let admin = Database::<guestlist::sqlx::Postgres>::open(1).await;
    admin
        .exec(format!("DROP DATABASE IF EXISTS {name} WITH (FORCE)"))
        .await;
    admin.exec(format!("CREATE DATABASE {name}")).await;
    let (base, query) = admin.url.split_once('?').unwrap_or((&admin.url, ""));
    let (server, _) = base.rsplit_once('/').expect("a database URL");
    if query.is_empty() {
        format!("{server}/{name}")
    } else {
        format!("{server}/{name}?{query}")
    }
}
