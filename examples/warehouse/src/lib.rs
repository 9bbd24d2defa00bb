//! The warehouse story from guestlist's design, with every part real.
//!
//! - [`payments`] stands in for Stripe: `POST /v1/charges` creates a charge, behind guestlist's
//!   Idempotency-Key layer in transactional mode, so a retried charge returns the same charge id.
//! - [`warehouse`] consumes `OrderPaid` from NATS JetStream, RabbitMQ, Kafka or SQS with the
//!   inbox, in [`picking`]'s three steps: it charges through `payments` with the key it carries
//!   (`warehouse:<event id>/charge`), reserves the stock, then sets the order to PICKING and
//!   creates a pick task. A redelivery after a crash resumes after the last finished step, and
//!   a charge cut mid-call is asked again with the same key, so payments replays it rather than
//!   charging twice. Its own API creates orders, behind the same layer.
//!
//! Run `payments`, then `warehouse`, then publish with `order-paid`, all binaries of this crate
//! (the crate's README walks through it); its tests play the crash. Each service says where it
//! listens once it is [ready]: tables there, listener bound, consumer attached.

pub mod broker;
pub mod db;
pub mod payments;
pub mod picking;
pub mod ready;
pub mod telemetry;
pub mod warehouse;
