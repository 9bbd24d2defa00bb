//! Core ideas of guestlist, free of I/O: who handles a message ([`HandlerName`]), which message it
//! is ([`MessageId`]), what a claim found ([`Claim`]), how long the guest list remembers
//! ([`Retention`]) and which table holds it ([`TableName`]); and for HTTP, the client's
//! [`IdempotencyKey`], its [`Scope`], the request's [`Fingerprint`], the [`StoredResponse`] and
//! the [`KeyStore`] that keeps them. Why a message did not go through, at any hop, is one
//! [`FailureKind`]; a hop that waits between tries waits by [`Backoff`], and one asked to stop stops
//! [`within_grace`]. The moves the stores
//! make on a key's row and the relay's lease are in [`protocol`], where the model check runs them.
//!
//! Every type validates on construction, so a value that exists is a value the stores can use.
//!
//! ```
//! use guestlist_core::{HandlerName, MessageId};
//!
//! let handler = HandlerName::new("warehouse")?;
//! let id = MessageId::new("evt_9f3k")?;
//! assert_eq!(id.as_str(), "evt_9f3k");
//!
//! // An upstream without ids: hash the exact bytes received.
//! let derived = MessageId::from_raw_bytes(br#"{"order":42}"#);
//! assert!(derived.as_str().starts_with("sha256:"));
//! # Ok::<(), guestlist_core::Error>(())
//! ```
//!
//! The guide tells the whole story, with each part's guarantees and failure tables: see
//! [introduction](https://github.com/guestlist-rs/guestlist/blob/main/docs/guide/src/introduction.md)
//! (or build it locally with `mdbook serve docs/guide`).

mod backoff;
mod box_error;
mod claim;
mod dead_retry;
mod deferral;
mod error;
mod failure_class;
mod failure_kind;
mod fingerprint;
mod grace;
mod handler_name;
pub mod header_lines;
mod idempotency_key;
pub mod json_id;
mod key_notices;
mod key_report;
mod key_store;
mod message_id;
mod ordering_key;
mod outgoing;
mod printable;
pub mod protocol;
mod publish;
mod retention;
mod scope;
#[cfg(feature = "serde")]
mod serde_millis;
mod stored_response;
mod table_name;
mod topic;
pub mod trace_context;

pub use backoff::Backoff;
pub use box_error::BoxError;
pub use claim::Claim;
pub use dead_retry::{RETRY_FOR_HEADER, RETRY_OF_HEADER, retry_broker_id};
pub use deferral::{Deferral, defer, watch_deferral};
pub use error::Error;
pub use failure_class::{failure_class, failure_group};
pub use failure_kind::FailureKind;
pub use fingerprint::{Fingerprint, FingerprintBuilder};
pub use grace::{StopSignal, within_grace};
pub use handler_name::HandlerName;
pub use idempotency_key::IdempotencyKey;
pub use key_notices::{KeyNotice, KeyNotices};
pub use key_report::{HeldKey, KeyRecord, KeyState, KeyStats};
pub use key_store::{Attempt, Completed, KeyClaim, KeyStore, ScopeUsage};
pub use message_id::MessageId;
pub use ordering_key::OrderingKey;
pub use outgoing::Outgoing;
pub use publish::{Confirmed, OutboxMessage, Outcomes, Publish, PublishError};
pub use retention::Retention;
pub use scope::Scope;
pub use stored_response::{StoredBody, StoredResponse};
pub use table_name::TableName;
pub use topic::Topic;
