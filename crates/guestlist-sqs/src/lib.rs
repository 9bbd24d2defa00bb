//! guestlist's consumer on Amazon SQS.
//!
//! [`SqsSource`] long-polls a queue for up to ten messages at a time (SQS's limit). A received
//! message is invisible for the queue's visibility timeout; it is deleted
//! (`DeleteMessageBatch`) only after the batch's transaction committed, and a delete that fails
//! is retried, then reported: the message comes back and the inbox answers it as a duplicate.
//! While handlers run, `ChangeMessageVisibility` heartbeats keep the batch in hand invisible. A
//! failed message is handed back by setting its visibility to the backoff delay. Poison is told
//! by SQS's own `ApproximateReceiveCount`: it goes to the dead-letter queue you name, with its
//! error in a `guestlist-error` attribute, or, when the queue has a redrive policy of its own,
//! to that policy (detected and logged at start-up: the consumer then dead-letters at the
//! policy's `maxReceiveCount`, and SQS moves the message on its next receive).
//!
//! FIFO queues keep each message group's order: when a message fails, the later messages of its
//! group in the same batch are handed back with it, untouched, and come again after it.
//!
//! `IdFrom::BrokerId` reads the SQS `MessageId`, or a message attribute of your choosing
//! ([`SqsSourceBuilder::broker_id_attribute`]); message attributes are the headers, and JSON
//! fields and the payload's SHA-256 work as on the other brokers. A queue subscribed to an SNS
//! topic without raw message delivery receives each notification wrapped in SNS's JSON
//! envelope: with [`SqsSourceBuilder::sns_envelopes`], the payload is the notification's
//! `Message` as SNS received it, the broker id is SNS's `MessageId` (the same for every copy SNS
//! delivers of one publish), and SNS's message attributes are the headers.
//!
//! [`SqsPublisher`] is the other direction: the outbox relay's publisher, with each message's
//! ordering key as the FIFO `MessageGroupId` and its id as the `MessageDeduplicationId`.
//!
//! Credentials, region and endpoint come from the usual AWS environment and configuration
//! files (`AWS_ACCESS_KEY_ID`, `AWS_PROFILE`, `AWS_REGION`, `AWS_ENDPOINT_URL`, instance and
//! container roles, SSO), through `aws-config`; [`SqsSourceBuilder::endpoint_url`] points at a
//! local server (moto, LocalStack, ElasticMQ). Or hand over a client you built yourself.
//!
//! The guide tells the whole story, with each part's guarantees and failure tables: see
//! [broker consumers](https://github.com/guestlist-rs/guestlist/blob/main/docs/guide/src/consumers.md)
//! (or build it locally with `mdbook serve docs/guide`).

mod client_settings;
mod delivery;
mod envelope;
mod fifo;
mod publisher;
mod queue;
mod shared;
mod source;

pub use aws_sdk_sqs;
pub use aws_sdk_sqs::Client;
pub use delivery::SqsDelivery;
pub use publisher::{SqsPublisher, SqsPublisherBuilder};
pub use source::{SqsSource, SqsSourceBuilder};

/// The message attribute that carries a message's id: [`SqsPublisher`] sets it, and
/// [`SqsSourceBuilder::broker_id_attribute`] reads it.
pub const MESSAGE_ID_ATTRIBUTE: &str = "message-id";

/// The message attribute a poison message carries its error in, on the dead-letter queue.
pub const ERROR_ATTRIBUTE: &str = "guestlist-error";

/// A failure to set up the source or the publisher, with what to do about it.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// A queue does not exist.
    #[error(
        "SQS queue {queue} does not exist: create it first (aws sqs create-queue --queue-name {queue})"
    )]
    MissingQueue {
        /// The queue looked for (its name or URL).
        queue: String,
    },
    /// Neither a dead-letter queue nor the queue's own redrive policy takes poison messages.
    #[error(
        "SQS queue {queue} has no redrive policy and no dead-letter queue was named: name one with \
         SqsSourceBuilder::dead_letter, or give the queue a redrive policy"
    )]
    NoDeadLetterQueue {
        /// The queue consumed.
        queue: String,
    },
    /// The endpoint given is not an `http://` or `https://` URL.
    #[error(
        "the SQS endpoint {endpoint:?} is not a URL: give http://host:port (a local server) or \
         https://sqs.REGION.amazonaws.com"
    )]
    BadEndpoint {
        /// What was given.
        endpoint: String,
    },
    /// SQS did not answer within the wait.
    #[error(
        "cannot reach SQS within {waited:?}: check the endpoint, the region and the \
         credentials (AWS_ENDPOINT_URL, AWS_REGION, AWS_ACCESS_KEY_ID or AWS_PROFILE)"
    )]
    Unreachable {
        /// How long the check waited.
        waited: std::time::Duration,
    },
    /// SQS refused or could not be reached.
    #[error(
        "SQS error: {0} — check the endpoint, the region and the credentials (AWS_ENDPOINT_URL, \
         AWS_REGION, AWS_ACCESS_KEY_ID or AWS_PROFILE)"
    )]
    Sqs(String),
}

impl Error {
    /// An SDK error, with the service's own message where it sent one.
    fn sqs<E, R>(err: aws_sdk_sqs::error::SdkError<E, R>) -> Self
    where
        E: std::error::Error + Send + Sync + 'static,
        R: std::fmt::Debug + Send + Sync + 'static,
    {
        Self::Sqs(describe(err))
    }
}

/// An SDK error as one line: the service's code and message, or the transport's error chain.
fn describe<E, R>(err: aws_sdk_sqs::error::SdkError<E, R>) -> String
where
    E: std::error::Error + Send + Sync + 'static,
    R: std::fmt::Debug + Send + Sync + 'static,
{
    let err = aws_sdk_sqs::error::DisplayErrorContext(err);
    err.to_string()
}

/// Refuses an endpoint that is not an `http://` or `https://` URL with a host, before any
/// client is built on it.
///
/// ```
/// assert!(guestlist_sqs::check_endpoint("http://127.0.0.1:5000").is_ok());
/// assert!(guestlist_sqs::check_endpoint("not a url").is_err());
/// ```
pub fn check_endpoint(endpoint: &str) -> Result<(), Error> {
    let bad = || Error::BadEndpoint {
        endpoint: endpoint.to_owned(),
    };
    let rest = endpoint
        .strip_prefix("http://")
        .or_else(|| endpoint.strip_prefix("https://"))
        .ok_or_else(bad)?;
    let host = rest.split(['/', '?']).next().unwrap_or_default();
    if host.is_empty() || host.contains(char::is_whitespace) {
        return Err(bad());
    }
    Ok(())
}

/// A client configured from the AWS environment, with `endpoint_url` (a local server) when
/// given. HTTPS goes through rustls with ring.
pub async fn client(endpoint_url: Option<&str>) -> Client {
    let mut loader =
        aws_config::defaults(aws_config::BehaviorVersion::latest()).http_client(https());
    if let Some(endpoint) = endpoint_url {
        loader = loader.endpoint_url(endpoint);
    }
    Client::new(&loader.load().await)
}

/// A client of a local SQS server at `endpoint_url` (moto, LocalStack, ElasticMQ), with the
/// dummy credentials and region such servers accept, whatever the environment says.
pub fn local_client(endpoint_url: &str) -> Client {
    use aws_sdk_sqs::config::{BehaviorVersion, Credentials, Region};
    let config = aws_sdk_sqs::Config::builder()
        .behavior_version(BehaviorVersion::latest())
        .region(Region::new("us-east-1"))
        .credentials_provider(Credentials::new("test", "test", None, None, "local"))
        .endpoint_url(endpoint_url)
        .http_client(https())
        .build();
    Client::from_conf(config)
}

/// The HTTP client: rustls with ring.
fn https() -> aws_sdk_sqs::config::SharedHttpClient {
    use aws_smithy_http_client::tls::{Provider, rustls_provider::CryptoMode};
    aws_smithy_http_client::Builder::new()
        .tls_provider(Provider::Rustls(CryptoMode::Ring))
        .build_https()
}
