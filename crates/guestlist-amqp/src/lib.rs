//! guestlist's consumer on RabbitMQ.
//!
//! [`RabbitSource`] consumes a queue with manual acknowledgements and a prefetch window (make it
//! two batches, so that the next batch flows while one commits). A fetch takes the deliveries
//! that have arrived, up to the batch limit, and waits only while none has. A committed batch is
//! acknowledged with one `basic.ack` with `multiple` where no other delivery below it is still
//! unsettled (one by one otherwise).
//! Use a **quorum queue**: it counts deliveries (`x-delivery-count`), which guestlist needs to
//! tell a poison message from a new one. A NAK with backoff holds the message for the delay, then
//! requeues it. Dead letters are published, with the error in a `guestlist-error` header, to the
//! dead-letter exchange you name (then the original is acknowledged); without one, the message is
//! rejected without requeue, to the queue's own dead-letter exchange if it has one.
//!
//! `IdFrom::BrokerId` reads the AMQP `message_id` property: what any client sets as the
//! message's id (pika's `BasicProperties(message_id=…)`, amqplib's `messageId`, the Java
//! client's `messageId(…)`), so publishers in other languages need no id in the body.
//!
//! [`RabbitPublisher`] is the other direction: the outbox relay's publisher, with publisher
//! confirms and the `message_id` property set.
//!
//! The guide tells the whole story, with each part's guarantees and failure tables: see
//! [broker consumers](https://github.com/guestlist-rs/guestlist/blob/main/docs/guide/src/consumers.md)
//! (or build it locally with `mdbook serve docs/guide`).

use lapin::types::ShortString;
use lapin::{BasicProperties, Connection, ConnectionProperties};

mod delivery;
mod publisher;
mod queue;
mod returns;
mod source;

pub use delivery::RabbitDelivery;
pub use publisher::{RabbitPublisher, RabbitPublisherBuilder};
pub use queue::declare_quorum_queue;
pub use source::{RabbitSource, RabbitSourceBuilder};

/// A failure to set up the source or the publisher, with what to do about it.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// RabbitMQ could not be reached.
    #[error(
        "cannot connect to RabbitMQ at {url}: {source} — check that it runs and the credentials are right"
    )]
    Connect {
        /// The URL tried (without its password).
        url: String,
        /// lapin's error.
        source: lapin::Error,
    },
    /// The queue does not exist.
    #[error(
        "RabbitMQ queue {queue} does not exist: declare it first (a quorum queue, so that deliveries are counted; `declare_quorum_queue` does)"
    )]
    MissingQueue {
        /// The queue looked for.
        queue: String,
    },
    /// RabbitMQ refused or failed.
    #[error("RabbitMQ error: {0}")]
    Amqp(#[from] lapin::Error),
    /// A setting RabbitMQ cannot take; the text says which and why.
    #[error("{0}")]
    Config(String),
}

/// A connection to RabbitMQ at `url`; an error names the host, not the credentials.
async fn connect(url: &str) -> Result<Connection, Error> {
    Connection::connect(url, ConnectionProperties::default())
        .await
        .map_err(|source| Error::Connect {
            url: url.split('@').next_back().unwrap_or(url).to_owned(),
            source,
        })
}

/// Properties for a message published with `message_id`.
pub fn with_message_id(message_id: &str) -> BasicProperties {
    BasicProperties::default().with_message_id(ShortString::from(message_id))
}
