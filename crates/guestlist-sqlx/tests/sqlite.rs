//! The inbox suite on SQLite, over a real connection.

mod common;

inbox_suite!(guestlist_sqlx::sqlx::Sqlite);
outbox_suite!(guestlist_sqlx::sqlx::Sqlite);
