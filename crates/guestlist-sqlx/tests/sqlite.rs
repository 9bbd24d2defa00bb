//! The inbox suite on SQLite, over a real connection.

mod common;

inbox_suite!(guestlist::sqlx::Sqlite);
outbox_suite!(guestlist::sqlx::Sqlite);
