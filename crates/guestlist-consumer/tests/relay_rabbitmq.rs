//! The outbox relay to RabbitMQ, from PostgreSQL, SQLite and MariaDB/MySQL. Module names start
//! with two letters no other test module of this crate uses: they name queues and tables.

mod common;

relay_suite!(qpg, common::brokers::Rabbit, sqlx::Postgres);
relay_suite!(qlite, common::brokers::Rabbit, sqlx::Sqlite);
relay_suite!(qmy, common::brokers::Rabbit, sqlx::MySql);
