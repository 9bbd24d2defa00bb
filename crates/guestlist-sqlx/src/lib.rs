//! guestlist's stores on [`sqlx`]: the inbox, the idempotency keys and the outbox, their schema
//! and their purge, for PostgreSQL, SQLite and MySQL/MariaDB, each behind a feature (`postgres`,
//! `sqlite`, `mysql`).
//!
//! The inbox claims `(handler, message id)` with one `INSERT` on the caller's own transaction, so
//! that the tick on the guest list and the handler's work commit together or not at all. See
//! [`Inbox`] for the API and the `guestlist` crate for the guide.
//!
//! The guide tells the whole story, with each part's guarantees and failure tables: see
//! [the inbox](https://github.com/guestlist-rs/guestlist/blob/main/docs/guide/src/inbox.md)
//! (or build it locally with `mdbook serve docs/guide`).

#![cfg_attr(docsrs, feature(doc_cfg))]
// Without a backend feature there is nothing to call the inbox's machinery.
#![cfg_attr(
    not(any(feature = "postgres", feature = "sqlite", feature = "mysql")),
    allow(dead_code, unused_variables)
)]

mod activity;
mod backend;
mod error;
mod failure;
mod fencing;
mod health;
mod history;
mod inbox;
mod keys;
mod outbox;
mod purge;
mod purger;
mod retry;
mod scaffold;
mod schema;
mod steps;
mod table_size;
mod unix_ms;
mod work_error;

pub use activity::PerMinute;
pub use backend::Backend;
#[cfg(feature = "sqlite")]
pub use backend::sqlite::{SQLITE_BUSY_TIMEOUT, sqlite_options};
pub use error::Error;
pub use failure::failure_kind;
/// A value guestlist refuses (`guestlist_core::Error`), named for what it is beside this crate's
/// own [`Error`], which wraps it as [`Error::Invalid`].
pub use guestlist_core::Error as InvalidValue;
pub use guestlist_core::{
    Attempt, Backoff, Claim, Completed, FailureKind, Fingerprint, HandlerName, IdempotencyKey,
    KeyClaim, KeyStore, MessageId, OrderingKey, Retention, Scope, StoredBody, StoredResponse,
    TableName, Topic,
};
pub use health::Health;
pub use history::{Found, History, Holder, Seen, Sighting};
pub use inbox::{
    BatchProcessed, DeadCopy, DeadGroup, DeadRetry, DeadState, Deferrals, HandlerRows, Inbox,
    InboxStats, IncomingDeadLetter, KEPT_BODY_BYTES, MidSteps, ProcessError, Processed, Stepped,
};
#[cfg(any(feature = "postgres", feature = "sqlite"))]
pub use keys::{BatchBackend, BatchedKeyStore};
pub use keys::{HeldKey, KeyHashing, KeyRecord, KeyState, KeyStats, Sealing, SqlKeyStore};
pub use outbox::{
    Confirmed, DeadEdit, DeadLetter, EDITED_HEADER, Enqueued, Outbox, OutboxMessage, OutboxStats,
    Outcomes, Outgoing, OutgoingGroup, Publish, PublishError, Relay, RelayLease, RelayStats,
    Relayed, ShardStats,
};
pub use purge::{Purge, Purgeable, Purged};
pub use purger::{Purger, PurgerHandle};
pub use schema::Schema;
pub use sqlx;
pub use steps::{MAX_STEP_RESULT, StepError, Steps};
pub use table_size::TableSize;
pub use work_error::WorkError;
