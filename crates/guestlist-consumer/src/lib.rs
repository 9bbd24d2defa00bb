//! guestlist's consumer runtime: the loop every broker adapter shares.
//!
//! Fetch a batch; claim its message ids in one transaction; run the handler for each fresh
//! message on that transaction; commit; only then acknowledge, duplicates included. A handler
//! error rolls the batch back and the messages go through one at a time, so that the failing
//! one is negatively acknowledged with backoff and the rest are not lost. A message that keeps
//! failing is dead-lettered, with its error, after the configured number of deliveries.
//!
//! Brokers plug in through [`Source`] and [`Delivery`]: `guestlist-nats` for NATS JetStream,
//! `guestlist-amqp` for RabbitMQ.

mod consumer;
mod delivery;
mod id_from;
mod message;
mod shutdown;

pub use consumer::{Consumer, ConsumerError, Handled, HandlerFuture};
pub use delivery::{BrokerError, Delivery, Source};
pub use id_from::IdFrom;
pub use message::Message;
pub use shutdown::shutdown_signal;
