//! guestlist's stores on [`sqlx`]: the inbox, its schema and its purge, for PostgreSQL, SQLite
//! and MySQL/MariaDB, each behind a feature (`postgres`, `sqlite`, `mysql`).
//!
//! The inbox claims `(handler, message id)` with one `INSERT` on the caller's own transaction, so
//! that the tick on the guest list and the handler's work commit together or not at all. See
//! [`Inbox`] for the API and the `guestlist` crate for the guide.

#![cfg_attr(docsrs, feature(doc_cfg))]
// Without a backend feature there is nothing to call the inbox's machinery.
#![cfg_attr(
    not(any(feature = "postgres", feature = "sqlite", feature = "mysql")),
    allow(dead_code, unused_variables)
)]

mod backend;
mod deferrals;
mod error;
mod inbox;
mod key_report;
mod keys;
#[cfg(feature = "postgres")]
mod keys_batched;
#[cfg(feature = "postgres")]
mod keys_locked;
mod process;
mod purge;
mod purger;
mod retry;
mod schema;
mod sealing;

pub use backend::Backend;
#[cfg(feature = "sqlite")]
pub use backend::sqlite;
pub use deferrals::Deferrals;
pub use error::Error;
pub use guestlist_core::{
    Attempt, Begin, Claim, Completed, Fingerprint, HandlerName, IdempotencyKey, KeyStore,
    MessageId, Retention, Scope, StoredBody, StoredResponse, TableName,
};
pub use inbox::Inbox;
pub use key_report::{KeyRecord, KeyState, KeyStats};
pub use keys::SqlKeyStore;
#[cfg(feature = "postgres")]
pub use keys_batched::BatchedKeyStore;
pub use process::{BatchProcessed, ProcessError, Processed, WorkFuture};
pub use purge::{Purge, Purgeable, Purged};
pub use purger::{Purger, PurgerHandle};
pub use schema::Schema;
pub use sealing::{KeyHashing, Sealing};
pub use sqlx;
