//! The broker suite on RabbitMQ (a quorum queue), with PostgreSQL and with SQLite as the store.

mod common;

guestlist_testkit::broker_suite!(rpg, common::Rabbit, sqlx::Postgres);
guestlist_testkit::broker_suite!(rlite, common::Rabbit, sqlx::Sqlite);
guestlist_testkit::outage_suite!(rout, common::Rabbit);
