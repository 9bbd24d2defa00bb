//! The outbox relay to NATS JetStream, from PostgreSQL, SQLite and MariaDB/MySQL. Module names
//! start with two letters no other test module of this crate uses: they name streams and tables.

mod common;

relay_suite!(jpg, common::brokers::Nats, sqlx::Postgres);
relay_suite!(jlite, common::brokers::Nats, sqlx::Sqlite);
relay_suite!(jmy, common::brokers::Nats, sqlx::MySql);

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn wake_on_commit() {
    common::relay::a_commit_wakes_an_idle_relay::<common::brokers::Nats>("wake_on_commit").await;
}
