//! The warehouse story from guestlist's design, with every part real.
//!
//! - [`payments`] stands in for Stripe: `POST /v1/charges` creates a charge, behind guestlist's
//!   Idempotency-Key layer in transactional mode, so a retried charge returns the same charge id.
//! - [`warehouse`] consumes `OrderPaid` from NATS JetStream or RabbitMQ with the inbox: it sets
//!   the order to PICKING, creates a pick task, and charges through `payments` with the key it
//!   carries (`warehouse:<event id>/charge`), so that a redelivery after a crash charges the same
//!   charge again rather than a second one. Its own API creates orders, behind the same layer.
//!
//! Run `payments`, then `warehouse`, then publish with `order-paid`, all binaries of this crate
//! (the crate's README walks through it); its tests play the crash. Each service says where it
//! listens once it is [ready]: tables there, listener bound, consumer attached.

pub mod broker;
pub mod db;
pub mod payments;
pub mod ready;
pub mod telemetry;
pub mod warehouse;
