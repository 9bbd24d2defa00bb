//! The consumer's stories, on every broker and database, a file per theme.

mod ambiguous;
mod broker_away;
mod chaos;
mod dead_retry;
mod dead_retry_console;
mod dead_retry_killed;
mod dead_retry_program;
mod deferrals;
mod flow;
mod keys;
mod keys_killed;
mod keys_outage;
mod outage;
mod start;
mod stops;

pub use ambiguous::*;
pub use broker_away::*;
pub use chaos::*;
pub use dead_retry::*;
pub use dead_retry_console::*;
pub use dead_retry_killed::*;
pub use dead_retry_program::*;
pub use deferrals::*;
pub use flow::*;
pub use keys::*;
pub use keys_killed::*;
pub use keys_outage::*;
pub use outage::*;
pub use start::*;
pub use stops::*;
