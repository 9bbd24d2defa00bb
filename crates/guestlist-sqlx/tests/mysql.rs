//! The inbox suite on MariaDB/MySQL, over a real connection.

mod common;

inbox_suite!(guestlist::sqlx::MySql);
outbox_suite!(guestlist::sqlx::MySql);
