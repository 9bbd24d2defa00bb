//! The broker suite on NATS JetStream, with PostgreSQL and with SQLite as the store.

mod common;

broker_suite!(npg, common::brokers::Nats, sqlx::Postgres);
broker_suite!(nlite, common::brokers::Nats, sqlx::Sqlite);
outage_suite!(nout, common::brokers::Nats);
