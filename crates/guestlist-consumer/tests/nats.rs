//! The broker suite on NATS JetStream, with PostgreSQL as the store.

mod common;

broker_suite!(common::brokers::Nats);
