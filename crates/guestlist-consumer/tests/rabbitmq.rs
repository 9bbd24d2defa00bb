//! The broker suite on RabbitMQ (a quorum queue), with PostgreSQL and with SQLite as the store.

mod common;

broker_suite!(rpg, common::brokers::Rabbit, sqlx::Postgres);
broker_suite!(rlite, common::brokers::Rabbit, sqlx::Sqlite);
outage_suite!(rout, common::brokers::Rabbit);
