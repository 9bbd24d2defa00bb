//! The broker suite on RabbitMQ (a quorum queue), with PostgreSQL as the store.

mod common;

broker_suite!(common::brokers::Rabbit);
