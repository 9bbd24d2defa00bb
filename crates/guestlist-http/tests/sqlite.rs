//! The Idempotency-Key suite on SQLite, in transactional mode.

mod common;

http_suite!(transactional, common::stores::Sql<sqlx::Sqlite>);
