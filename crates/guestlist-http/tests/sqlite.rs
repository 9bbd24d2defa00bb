//! The Idempotency-Key suite on SQLite: transactional mode, and plain mode with requests
//! batched into rounds as the gateway uses it.

mod common;

http_suite!(transactional, common::stores::Sql<sqlx::Sqlite>);
http_suite!(batched, common::stores::Batched<sqlx::Sqlite>);
