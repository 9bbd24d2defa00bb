//! The broker suite on NATS JetStream, with PostgreSQL and with SQLite as the store.

mod common;

guestlist_testkit::broker_suite!(npg, common::Nats, sqlx::Postgres);
guestlist_testkit::broker_suite!(nlite, common::Nats, sqlx::Sqlite);
guestlist_testkit::keys_suite!(nkeys, common::Nats, sqlx::Postgres);
guestlist_testkit::keys_suite!(nqlite, common::Nats, sqlx::Sqlite);
guestlist_testkit::dead_letters_suite!(ndead, common::Nats, sqlx::Postgres);
guestlist_testkit::dead_letters_suite!(nxdead, common::Nats, sqlx::Sqlite);
guestlist_testkit::outage_suite!(nout, common::Nats);
guestlist_testkit::broker_away_suite!(naway, common::Nats);
