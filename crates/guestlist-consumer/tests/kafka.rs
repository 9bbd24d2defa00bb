//! The broker suite on Kafka, with PostgreSQL and with SQLite as the store.

mod common;

broker_suite!(kpg, common::kafka::Kafka, sqlx::Postgres);
broker_suite!(klite, common::kafka::Kafka, sqlx::Sqlite);
