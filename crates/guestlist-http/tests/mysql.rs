//! The Idempotency-Key suite on MariaDB/MySQL, in transactional mode.

mod common;

http_suite!(transactional, common::stores::Sql<sqlx::MySql>);
http_wire_faults!(transactional_wire, common::stores::Sql<sqlx::MySql>);
