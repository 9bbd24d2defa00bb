//! The Idempotency-Key suite on PostgreSQL: transactional mode (the claim committed first, and
//! the claim on the handler's transaction), and plain mode as the gateway uses it.

mod common;

http_suite!(transactional, common::stores::Sql<sqlx::Postgres>);
http_suite!(plain, common::stores::PlainSql<sqlx::Postgres>);
http_suite!(locked, common::stores::LockedPostgres);
