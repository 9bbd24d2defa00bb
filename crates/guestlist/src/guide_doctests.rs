//! Compiles the guide's Rust snippets (`docs/guide/src/*.md`) and the README's as doctests, so
//! that an example in the documentation cannot drift from the API it shows.
//!
//! Included from `lib.rs` under `#[cfg(doctest)]` only: nothing here is part of the crate. One
//! item per file that has Rust code; the chapters without any (introduction, the gateway,
//! performance, tests, problem types) have none. Snippets marked `no_run` are compiled, not run:
//! they need a server (PostgreSQL, a broker, a payments service); the others run on SQLite.

/// The README's short examples, one per part.
#[doc = include_str!("../../../README.md")]
pub(crate) struct Readme;

/// Tutorial: the warehouse story, played on SQLite.
#[doc = include_str!("../../../docs/guide/src/tutorial.md")]
pub(crate) struct Tutorial;

/// The inbox: `process`, `transaction`, `claim`, batches, retention.
#[doc = include_str!("../../../docs/guide/src/inbox.md")]
pub(crate) struct Inbox;

/// Idempotency-Key for HTTP APIs.
#[doc = include_str!("../../../docs/guide/src/http.md")]
pub(crate) struct Http;

/// Broker consumers: NATS JetStream, RabbitMQ and Kafka.
#[doc = include_str!("../../../docs/guide/src/consumers.md")]
pub(crate) struct Consumers;

/// The outbox: the producer's hop.
#[doc = include_str!("../../../docs/guide/src/outbox.md")]
pub(crate) struct Outbox;

/// Carry the key forward.
#[doc = include_str!("../../../docs/guide/src/carry.md")]
pub(crate) struct Carry;

/// Steps: a handler's named steps, resumed after the last one finished.
#[doc = include_str!("../../../docs/guide/src/steps.md")]
pub(crate) struct Steps;

/// Operations: the purger.
#[doc = include_str!("../../../docs/guide/src/operations.md")]
pub(crate) struct Operations;
