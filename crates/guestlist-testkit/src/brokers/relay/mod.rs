//! The outbox relay's stories, on every broker and database: a producer's outbox, the relay, the
//! broker, and the consumer's inbox at the far end, counting effects.

mod ambiguous;
mod broker_away;
mod chaos;
mod held;
mod lapses;
mod line;
mod refusals;
mod restarted;
mod shares;
mod stalled;
mod starved;
mod stories;

pub use ambiguous::*;
pub use broker_away::*;
pub use chaos::*;
pub use held::{HeldAfterConfirm, held_relay};
pub use lapses::*;
pub use line::Line;
pub use refusals::*;
pub use restarted::*;
pub use shares::*;
pub use stalled::*;
pub use starved::*;
pub use stories::*;
