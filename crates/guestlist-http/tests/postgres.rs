//! The Idempotency-Key suite on PostgreSQL: transactional mode, and plain mode as the gateway
//! uses it.

mod common;

http_suite!(transactional, common::stores::Sql<sqlx::Postgres>);
http_suite!(plain, common::stores::PlainSql<sqlx::Postgres>);
