//! The protocol's moves, free of I/O: what a key's row lets an attempt do, what the relay's lease
//! row lets a relay do, and what a published batch's outcomes mean.
//!
//! The stores run these functions on the rows they read, and their SQL statements carry the same
//! conditions in their `WHERE` clauses (the conformance tests of `guestlist-sqlx` run each
//! statement against each function on every backend). The model check (`crates/guestlist-model`)
//! runs the same functions under every interleaving of two or three actors, with crashes, lost
//! messages and an advancing clock, and checks the guarantees on every state it reaches.

mod key_lease;
mod relay_lease;
mod settled;

pub use key_lease::{KeyLeaseRow, KeyRowView, Settlement, settle};
pub use relay_lease::{HeldLease, RelayLeaseRow};
pub use settled::{Settled, SettledRow};
