//! The outbox relay to Kafka, from PostgreSQL, SQLite and MariaDB/MySQL. Module names start
//! with two letters no other test module of this crate uses: they name topics and tables.

mod common;

relay_suite!(xpg, common::kafka::Kafka, sqlx::Postgres);
relay_suite!(xlite, common::kafka::Kafka, sqlx::Sqlite);
relay_suite!(xmy, common::kafka::Kafka, sqlx::MySql);
