//! The steps stories on NATS JetStream and PostgreSQL: a three-step handler's consumer killed at
//! each step boundary, run twice at once, and stopped past its lease.

mod common;

guestlist_testkit::steps_suite!(nst, common::Nats);
