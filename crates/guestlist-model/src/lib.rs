//! The model check of guestlist's protocol, with [stateright]: the idempotency key's lease
//! ([`keys`]), the outbox relay's lease ([`relay`]) and a message's steps ([`steps`]), each a few
//! actors that crash, stall and lose messages at every step while a clock runs, explored state
//! by state.
//!
//! The models run the protocol's own moves, [`guestlist_core::protocol`], the functions the stores
//! run on the rows they read, whose conditions their SQL carries. Each model takes its moves as
//! a value, so that a test can hand it a broken one and see the check fail:
//!
//! ```
//! use guestlist_model::keys::{KeyModel, Mode};
//! use stateright::{Checker, Model};
//!
//! let checker = KeyModel::new(Mode::Transactional).checker().spawn_bfs().join();
//! checker.assert_properties();
//! assert!(checker.unique_state_count() > 1_000);
//! ```
//!
//! `cargo test -p guestlist-model` runs every model with its bounds; the guide's tests chapter
//! has the state counts and a counterexample.
//!
//! [stateright]: https://docs.rs/stateright

pub mod consumer;
pub mod keys;
pub mod relay;
pub mod steps;
pub mod tick;
