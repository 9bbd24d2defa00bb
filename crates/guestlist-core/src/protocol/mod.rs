//! The protocol's moves, free of I/O: what a key's row lets an attempt do, what the relay's lease
//! row lets a relay do, what a published batch's outcomes mean, what a consumer makes of a
//! message that comes back, and what a message's journal of steps says of the next one.
//!
//! The stores and the consumer runtime run these functions on what they read, and the SQL
//! statements carry the same conditions in their `WHERE` clauses (a story of `guestlist-sqlx`
//! runs each write on a key's row against its guard, for every kind of row, on every backend;
//! the relay suite's fencing stories do the same for the lease). The model check
//! (`crates/guestlist-model`) runs the same functions under every interleaving of two or three
//! actors, with crashes, lost messages and an advancing clock, and checks the guarantees on
//! every state it reaches.

mod key_lease;
mod redelivery;
mod relay_lease;
mod settled;
mod shard_share;
mod steps;

pub use key_lease::{KeyLeaseRow, KeyRowView, Settlement, settle};
pub use redelivery::{AfterDeferral, Redelivery};
pub use relay_lease::{HeldLease, RelayLeaseRow};
pub use settled::{Settled, SettledRow};
pub use shard_share::{SLOTS, ShardMoves, quota, shard_of, slot};
pub use steps::{StepAt, step_at};
