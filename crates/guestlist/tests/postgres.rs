//! The inbox suite on PostgreSQL, over a real connection.

mod common;

inbox_suite!(guestlist::sqlx::Postgres);
outbox_suite!(guestlist::sqlx::Postgres);
