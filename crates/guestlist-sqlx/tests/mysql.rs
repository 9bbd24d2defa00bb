//! The inbox suite on MariaDB/MySQL, over a real connection.

mod common;

inbox_suite!(guestlist_sqlx::sqlx::MySql);
outbox_suite!(guestlist_sqlx::sqlx::MySql);
wire_faults_suite!(guestlist_sqlx::sqlx::MySql);
