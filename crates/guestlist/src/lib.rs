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

// The root holds the everyday names: the inbox and its claim, the outbox and its relay, the key
// store, the ids they take, the error. Everything else (operators' read-models, the key store's
// protocol types, the purge's parts) is in the module of the part it belongs to.

/// A value guestlist refuses (an id, a name, a table name, a retention), with what to do
/// instead: `guestlist_core::Error`, named for what it is beside the store's [`Error`], which
/// wraps it as [`Error::Invalid`].
pub use guestlist_core::Error as InvalidValue;
pub use guestlist_core::{
    BoxError, Claim, HandlerName, IdempotencyKey, KeyStore, MessageId, Outgoing, Retention, Topic,
};
pub use guestlist_sqlx::{
    Backend, Error, Inbox, Outbox, PerMinute, Processed, Purger, Relay, Schema, SqlKeyStore,
    TableName, sqlx,
};
#[cfg(feature = "sqlite")]
pub use guestlist_sqlx::{SQLITE_BUSY_TIMEOUT, sqlite_options};

pub mod inbox {
    //! The inbox: `(handler, message id)` claimed insert-first on the handler's own
    //! transaction ([`Inbox`]), what a claim or a processed message came to, a handler's
    //! named steps resumed after the last one finished ([`Steps`], `Inbox::process_steps`), a
    //! handler's "not yet" ([`defer`]), and what operators read of the table (its figures, each
    //! handler's rows, deferrals, incoming dead letters).
    //!
    //! [`Inbox`], [`Claim`], [`Processed`], [`HandlerName`] and [`MessageId`] are also at the
    //! crate's root.
    pub use guestlist_core::{Claim, Deferral, FailureKind, HandlerName, MessageId, defer};
    pub use guestlist_sqlx::{
        BatchProcessed, DeadCopy, DeadGroup, DeadRetry, DeadState, Deferrals, HandlerRows, Inbox,
        InboxStats, IncomingDeadLetter, KEPT_BODY_BYTES, MAX_STEP_RESULT, MidSteps, ProcessError,
        Processed, StepError, Stepped, Steps, WorkError, failure_kind,
    };
}

pub mod outbox {
    //! The producer's hop: messages enqueued in the transaction that makes them true
    //! ([`Outbox`]), the [`Relay`] that publishes them in commit order per key, the publisher
    //! it drives ([`Publish`]), and what operators read of the table (figures per shard, the
    //! relay's lease, outgoing dead letters).
    //!
    //! [`Outbox`], [`Outgoing`], [`Topic`] and [`Relay`] are also at the crate's root.
    pub use guestlist_core::{
        Confirmed, OrderingKey, OutboxMessage, Outcomes, Outgoing, Publish, PublishError, Topic,
    };
    pub use guestlist_sqlx::{
        DeadEdit, DeadLetter, EDITED_HEADER, Enqueued, Health, Outbox, OutboxStats, OutgoingGroup,
        Relay, RelayLease, RelayStats, Relayed, ShardStats,
    };
}

pub mod keys {
    //! Idempotency keys: the [`KeyStore`] protocol (claim, complete, release) and its
    //! SQL store ([`SqlKeyStore`]), the request's [`Fingerprint`], the response stored and
    //! replayed, keys at rest (hashed or sealed), and what operators read of the table.
    //!
    //! [`SqlKeyStore`], [`KeyStore`] and [`IdempotencyKey`] are also at the crate's root.
    pub use guestlist_core::{
        Attempt, Completed, Fingerprint, FingerprintBuilder, HeldKey, IdempotencyKey, KeyClaim,
        KeyRecord, KeyState, KeyStats, KeyStore, Scope, ScopeUsage, StoredBody, StoredResponse,
    };
    /// Plain-mode keys with concurrent requests' claims and responses written in rounds
    /// (features `postgres`, `sqlite`).
    #[cfg(any(feature = "postgres", feature = "sqlite"))]
    pub use guestlist_sqlx::{BatchBackend, BatchedKeyStore};
    pub use guestlist_sqlx::{KeyHashing, Sealing, SqlKeyStore};
}

pub mod history {
    //! What every table knows of one id, in the order it happened ([`History`]): an
    //! operator's answer to "what happened to order 42's event?", as `guestlist history` prints
    //! it.
    pub use guestlist_sqlx::{Found, History, Holder, Seen, Sighting};
}

pub mod retention {
    //! Rows kept for a [`Retention`], then purged in small batches ([`Purge`]), by hand or by
    //! a [`Purger`] in the background, and the tables' sizes to plan it by.
    //!
    //! [`Retention`] and [`Purger`] are also at the crate's root.
    pub use guestlist_core::Retention;
    pub use guestlist_sqlx::{Purge, Purgeable, Purged, Purger, PurgerHandle, TableSize};
}

/// W3C Trace Context: the `traceparent` carried through the outbox, the brokers and the
/// carried keys, so that one distributed trace spans every hop (the `otel` feature exports it).
pub use guestlist_core::trace_context;

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
