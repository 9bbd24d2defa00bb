//! The Idempotency-Key suite on MariaDB/MySQL, in transactional mode.

mod common;

http_suite!(transactional, common::stores::Sql<sqlx::MySql>);
