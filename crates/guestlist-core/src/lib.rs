//! Core ideas of guestlist, free of I/O: who handles a message ([`HandlerName`]), which message it
//! is ([`MessageId`]), what a claim found ([`Claim`]), how long the guest list remembers
//! ([`Retention`]) and which table holds it ([`TableName`]).
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

mod claim;
mod error;
mod handler_name;
mod message_id;
mod printable;
mod retention;
mod table_name;

pub use claim::Claim;
pub use error::Error;
pub use handler_name::HandlerName;
pub use message_id::MessageId;
pub use retention::Retention;
pub use table_name::TableName;
