//! What a source and its deliveries share.

use aws_sdk_sqs::Client;

use crate::queue::{Queue, Redrive};

/// Where poison messages go.
#[derive(Debug)]
pub(crate) enum DeadLetters {
    /// Sent to this queue by the consumer, with their error.
    Queue { url: String, fifo: bool },
    /// Left to the consumed queue's own redrive policy.
    Redrive(Redrive),
}

/// What the source and its deliveries share.
#[derive(Debug)]
pub(crate) struct Shared {
    pub(crate) client: Client,
    pub(crate) queue: Queue,
    pub(crate) dead_letters: DeadLetters,
    /// The message attribute that holds the broker id, instead of the SQS `MessageId`.
    pub(crate) id_attribute: Option<String>,
    /// Whether SNS notifications are unwrapped.
    pub(crate) sns: bool,
}
