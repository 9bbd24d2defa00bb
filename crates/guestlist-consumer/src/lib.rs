//! guestlist's consumer runtime: the loop every broker adapter shares.
//!
//! Take what the broker has ready, up to a batch (100 by default, never waiting for it to fill);
//! claim its message ids in one transaction; run the handler for each fresh message on that
//! transaction; commit, fetching what is ready of the next batch meanwhile; only then
//! acknowledge, duplicates included, in as few round trips as the broker allows. A handler
//! error rolls the batch back: the failing message is negatively acknowledged with backoff (or
//! sent back for the wait its deferral asked), and the rest go through one at a time. A message
//! that keeps failing is dead-lettered, with its error, after the configured number of
//! deliveries. A database that is down is an outage, never the message's failure: the
//! deliveries in hand are held and kept alive until it answers, and
//! [`Consumer::health`] says so meanwhile.
//!
//! Brokers plug in through [`Source`] and [`Delivery`]: `guestlist-nats` for NATS JetStream,
//! `guestlist-amqp` for RabbitMQ, `guestlist-kafka` for Kafka.
//!
//! The guide tells the whole story, with each part's guarantees and failure tables: see
//! [broker consumers](https://github.com/guestlist-rs/guestlist/blob/main/docs/guide/src/consumers.md)
//! (or build it locally with `mdbook serve docs/guide`).

mod batch;
mod consumer;
mod delivery;
mod error;
mod failure;
mod handled;
mod handler;
mod held_keys;
mod id_from;
mod in_steps;
mod keep_alive;
mod key_from;
mod lanes;
mod message;
mod next_fetch;
mod outage;
mod retried;
mod runtime;
mod settings;
mod settle;
mod shutdown;
mod side_by_side;
mod step_handler;

pub use consumer::Consumer;
pub use delivery::{Delivery, Source};
pub use error::Error;
pub use guestlist_core::BoxError;
pub use handled::Handled;
pub use handler::Handler;
pub use id_from::IdFrom;
pub use in_steps::InSteps;
pub use key_from::KeyFrom;
pub use message::Message;
pub use shutdown::shutdown_signal;
pub use step_handler::StepHandler;
