//! guestlist's consumer on NATS JetStream.
//!
//! [`JetStreamSource`] pulls from a durable consumer with explicit acknowledgement: each fetch
//! takes what the stream has ready, up to the batch limit, and waits only while nothing is. A
//! committed batch is acknowledged with pipelined acks and one flush (one round trip for the
//! batch; [`JetStreamSourceBuilder::confirmed_acks`] waits for the server to confirm each instead).
//! Deliveries hand messages back with a delayed NAK, keep long handlers alive with in-progress
//! acks, and dead-letter by publishing the message with its error to a dead-letter subject, then
//! terminating it.
//!
//! [`JetStreamPublisher`] is the other direction: the outbox relay's publisher, with
//! `Nats-Msg-Id` set so that the stream drops a relay's repeat.
//!
//! The guide tells the whole story, with each part's guarantees and failure tables: see
//! [broker consumers](https://github.com/guestlist-rs/guestlist/blob/main/docs/guide/src/consumers.md)
//! (or build it locally with `mdbook serve docs/guide`).

use async_nats::jetstream;

mod delivery;
mod publisher;
mod source;

pub use delivery::{JetStreamDelivery, header_pairs};
pub use publisher::{JetStreamPublisher, JetStreamPublisherBuilder};
pub use source::{JetStreamSource, JetStreamSourceBuilder};

/// A failure to set up the source or the publisher, with what to do about it.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// NATS could not be reached.
    #[error(
        "cannot connect to NATS at {url}: {source} — check that nats-server runs with JetStream (-js)"
    )]
    Connect {
        /// The URL tried.
        url: String,
        /// NATS's error.
        source: async_nats::ConnectError,
    },
    /// The stream does not exist.
    #[error(
        "JetStream stream {stream} does not exist: create it first (nats stream add {stream}, or jetstream::Context::create_stream)"
    )]
    MissingStream {
        /// The stream looked for.
        stream: String,
    },
    /// No dead-letter subject was named.
    #[error(
        "name the subject poison messages go to with JetStreamSourceBuilder::dead_letter (and a stream that captures it)"
    )]
    NoDeadLetterSubject,
    /// JetStream refused or failed.
    #[error("JetStream error: {0}")]
    JetStream(String),
}

/// A JetStream context on the NATS server at `url`.
async fn connect(url: &str) -> Result<jetstream::Context, Error> {
    let client = async_nats::connect(url)
        .await
        .map_err(|source| Error::Connect {
            url: url.to_owned(),
            source,
        })?;
    Ok(jetstream::new(client))
}
