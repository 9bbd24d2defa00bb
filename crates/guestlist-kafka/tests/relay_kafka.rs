//! The outbox relay to Kafka, from PostgreSQL, SQLite and MariaDB/MySQL. Module names start
//! with two letters no other broker suite's test module uses: they name topics and tables.

mod common;

guestlist_testkit::relay_suite!(xpg, common::Kafka, sqlx::Postgres);
guestlist_testkit::relay_suite!(xlite, common::Kafka, sqlx::Sqlite);
guestlist_testkit::relay_suite!(xmy, common::Kafka, sqlx::MySql);
guestlist_testkit::relay_wire_suite!(xwire, common::Kafka);
guestlist_testkit::relay_shares_suite!(xshpg, common::Kafka, sqlx::Postgres);
