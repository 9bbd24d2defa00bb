//! # guestlist
//!
//! Brokers and HTTP clients deliver **at least once**: a crash between the work and the
//! acknowledgment brings the same message again. guestlist makes the processing
//! **exactly once** with a durable guest list of handled ids, kept in the same database
//! transaction as the work it guards.
//!
//! A bouncer who memorizes faces (a `HashSet` in memory) is worthless at the shift change (a
//! restart) and at the second door (a second pod). guestlist is the clipboard: the tick and the
//! admission happen in one motion (one transaction), the clipboard outlives every shift (it is in
//! the database), and every door works from the same list (the primary key serializes them).
//!
//! ## Features
//!
//! One per database, none by default: `postgres` (production; many instances share one table),
//! `sqlite` (embedded; no server), `mysql` (MySQL 8.0.13+ and MariaDB 10.3+). Then one per part,
//! each a module of this crate, so that a job needs one dependency:
//!
//! | feature | module | what |
//! |---|---|---|
//! | `http` (`axum` for its extractors) | `guestlist::http` | the `Idempotency-Key` layer |
//! | `redis` | `guestlist::redis` | a key store on Redis |
//! | `carry` (`reqwest` for its middleware) | `guestlist::carry`, `guestlist::defer` | keys carried downstream |
//! | `consumer` | `guestlist::consumer` | the broker consumer runtime |
//! | `nats`, `amqp` (or `rabbitmq`), `kafka`, `sqs` | `guestlist::nats`, `::amqp`, `::kafka`, `::sqs` | each broker's source and the relay's publisher |
//! | `otel` | `guestlist::otel` | OTLP export of the spans, the trace context through every hop |
//!
//! ```toml
//! # inbox + NATS consumer + carried keys
//! guestlist = { version = "0.1", features = ["postgres", "nats", "reqwest"] }
//! ```
//!
//! ## The inbox in one call
//!
//! ```
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() -> Result<(), Box<dyn std::error::Error>> {
//! use guestlist::{HandlerName, Inbox, MessageId, Processed};
//! use guestlist::sqlx::{self, SqlitePool};
//!
//! let pool = SqlitePool::connect_with(guestlist::sqlite_options("sqlite::memory:")?).await?;
//! let inbox = Inbox::<sqlx::Sqlite>::new();
//! inbox.migrate(&pool).await?;
//! sqlx::query("CREATE TABLE pick_tasks (order_id INTEGER)").execute(&pool).await?;
//!
//! let warehouse = HandlerName::new("warehouse")?;
//! let event = MessageId::new("evt_9f3k")?;
//! let mut acks = 0;
//! for _delivery in 0..5 {
//!     let done = inbox
//!         .process(&pool, &warehouse, &event, async |tx| {
//!             sqlx::query("INSERT INTO pick_tasks VALUES (42)").execute(&mut *tx).await
//!         })
//!         .await?;
//!     let _ran = matches!(done, Processed::Ran(_)); // fresh or duplicate: acknowledge either way
//!     acks += 1;
//! }
//! let tasks: i64 = sqlx::query_scalar("SELECT count(*) FROM pick_tasks").fetch_one(&pool).await?;
//! assert_eq!((acks, tasks), (5, 1)); // five deliveries, five acks, one pick task
//! # Ok(()) }
//! ```
//!
//! [`Inbox::claim`] does the same on a transaction you hold yourself; [`Inbox::claim_batch`] and
//! [`Inbox::process_batch`] claim a whole batch in one statement. Read [`guide`] for which writes
//! need an inbox at all.
//!
//! The guide tells the whole story, with each part's guarantees and failure tables: see
//! [introduction](https://github.com/guestlist-rs/guestlist/blob/main/docs/guide/src/introduction.md)
//! (or build it locally with `mdbook serve docs/guide`).

#![cfg_attr(docsrs, feature(doc_cfg))]

/// A value guestlist refuses (an id, a name, a table name, a retention), with what to do
/// instead: `guestlist_core::Error`, named for what it is beside the store's [`Error`], which
/// wraps it as [`Error::Invalid`].
pub use guestlist_core::Error as InvalidValue;
pub use guestlist_core::trace_context;
pub use guestlist_core::{
    Attempt, Backoff, Begin, BoxError, Claim, Completed, Deferral, FailureKind, Fingerprint,
    FingerprintBuilder, HandlerName, IdempotencyKey, KeyStore, MessageId, OrderingKey, Retention,
    Scope, ScopeUsage, StoredBody, StoredResponse, TableName, Topic,
};
pub use guestlist_sqlx::{
    Backend, BatchProcessed, Confirmed, DeadLetter, Deferrals, Enqueued, Error, Found, HandlerRows,
    Health, HeldKey, Holder, Inbox, InboxStats, IncomingDeadLetter, KeyHashing, KeyRecord,
    KeyState, KeyStats, Outbox, OutboxMessage, OutboxStats, Outcomes, Outgoing, ProcessError,
    Processed, Publish, PublishError, Purge, Purgeable, Purged, Purger, PurgerHandle, Relay,
    RelayLease, Relayed, Schema, Sealing, Seen, Sighting, SqlKeyStore, TableSize, Trace, WorkError,
    failure_kind, sqlx,
};
/// Plain-mode keys with concurrent requests' claims and responses written in rounds (features
/// `postgres`, `sqlite`).
#[cfg(any(feature = "postgres", feature = "sqlite"))]
pub use guestlist_sqlx::{BatchBackend, BatchedKeyStore};
#[cfg(feature = "sqlite")]
pub use guestlist_sqlx::{SQLITE_BUSY_TIMEOUT, sqlite_options};

/// Stripe-style `Idempotency-Key` for HTTP APIs: the tower layer (feature `http`).
#[cfg(feature = "http")]
pub use guestlist_http as http;

/// The idempotency-key store on Redis (feature `redis`).
#[cfg(feature = "redis")]
pub use guestlist_redis as redis;

/// Keys carried downstream, one per step: `CarryKey` for outbound calls, `key_for` (feature
/// `carry`; `reqwest` adds the reqwest-middleware).
#[cfg(feature = "carry")]
pub use guestlist_carry as carry;

/// Says "not yet" from a handler: the consumer hands the message back for the deferral's wait
/// without counting it as a failure.
pub use guestlist_core::defer;

/// The broker consumer runtime: `Consumer`, `IdFrom`, `Message` (feature `consumer`, which each
/// broker's feature turns on).
#[cfg(feature = "consumer")]
pub use guestlist_consumer as consumer;

/// NATS JetStream: `JetStreamSource` and the relay's `JetStreamPublisher` (feature `nats`).
#[cfg(feature = "nats")]
pub use guestlist_nats as nats;

/// RabbitMQ: `RabbitSource` and the relay's `RabbitPublisher` (feature `amqp`, or `rabbitmq`).
#[cfg(feature = "amqp")]
pub use guestlist_amqp as amqp;

/// Kafka: `KafkaSource` and the relay's `KafkaPublisher` (feature `kafka`).
#[cfg(feature = "kafka")]
pub use guestlist_kafka as kafka;

/// Amazon SQS: `SqsSource` and the relay's `SqsPublisher` (feature `sqs`).
#[cfg(feature = "sqs")]
pub use guestlist_sqs as sqs;

/// OpenTelemetry for programs: `Export` (OTLP/HTTP) and `W3c`, the trace context carried
/// through the outbox, the brokers and the carried keys (feature `otel`).
#[cfg(feature = "otel")]
pub use guestlist_otel as otel;

#[cfg(doctest)]
mod guide_doctests;

pub mod guide {
    #![doc = include_str!("docs/boundary.md")]
}
