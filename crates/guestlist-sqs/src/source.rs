//! The source: long-polled receives from one queue.

use std::sync::Arc;
use std::time::Duration;

use aws_sdk_sqs::types::MessageSystemAttributeName;
use guestlist_consumer::{BoxError, Source};

use crate::Error;
use crate::client_settings::{ClientSettings, client_setters};
use crate::delivery::SqsDelivery;
use crate::fifo::Groups;
use crate::queue::Queue;
use crate::shared::{DeadLetters, Shared};

/// Messages of one SQS queue, standard or FIFO.
///
/// A fetch long-polls for up to ten messages (SQS's limit per receive); a received message is
/// invisible for the queue's visibility timeout, which is the consumer's ack wait: the
/// consumer's keep-alives extend it (`ChangeMessageVisibility`) while handlers run. Messages are
/// deleted only after their batch committed; a failed message is handed back by setting its
/// visibility to the backoff delay.
#[derive(Debug)]
pub struct SqsSource {
    shared: Arc<Shared>,
    wait_time: Duration,
}

/// Settings for an [`SqsSource`]; [`connect`](Self::connect) looks the queues up.
#[derive(Debug, Clone)]
#[must_use]
pub struct SqsSourceBuilder {
    queue: String,
    client_settings: ClientSettings,
    dead_letter_queue: Option<String>,
    id_attribute: Option<String>,
    sns: bool,
    wait_time: Duration,
}

impl SqsSource {
    /// Settings for a consumer of `queue`: its name, or its URL.
    ///
    /// ```no_run
    /// # async fn run() -> Result<(), guestlist_sqs::Error> {
    /// let source = guestlist_sqs::SqsSource::builder("orders")
    ///     .dead_letter("orders-dead-letters")
    ///     .connect()
    ///     .await?;
    /// # let _ = source; Ok(()) }
    /// ```
    pub fn builder(queue: &str) -> SqsSourceBuilder {
        SqsSourceBuilder {
            queue: queue.to_owned(),
            client_settings: ClientSettings::default(),
            dead_letter_queue: None,
            id_attribute: None,
            sns: false,
            wait_time: Duration::from_secs(20),
        }
    }

    /// The queue's URL.
    pub fn queue_url(&self) -> &str {
        &self.shared.queue.url
    }

    /// Whether the queue is a FIFO queue.
    pub fn is_fifo(&self) -> bool {
        self.shared.queue.fifo
    }

    /// Receives up to `max` messages, waiting up to `wait` for the first.
    async fn receive(&self, max: usize, wait: Duration) -> Result<Vec<SqsDelivery>, BoxError> {
        let max = max.clamp(1, 10);
        let received = self
            .shared
            .client
            .receive_message()
            .queue_url(&self.shared.queue.url)
            .max_number_of_messages(max as i32)
            .wait_time_seconds(wait.as_secs().min(20) as i32)
            .message_system_attribute_names(MessageSystemAttributeName::ApproximateReceiveCount)
            .message_system_attribute_names(MessageSystemAttributeName::MessageGroupId)
            .message_attribute_names("All")
            .send()
            .await
            .map_err(crate::describe)?;
        let messages = received.messages.unwrap_or_default();
        let groups = self.shared.queue.fifo.then(|| {
            Arc::new(Groups::new(
                messages
                    .iter()
                    .map(|message| {
                        let group = message
                            .attributes
                            .as_ref()
                            .and_then(|a| a.get(&MessageSystemAttributeName::MessageGroupId))
                            .cloned()
                            .unwrap_or_default();
                        (group, message.receipt_handle.clone().unwrap_or_default())
                    })
                    .collect(),
            ))
        });
        Ok(messages
            .into_iter()
            .enumerate()
            .map(|(place, message)| {
                let groups = groups.as_ref().map(|groups| (Arc::clone(groups), place));
                SqsDelivery::new(Arc::clone(&self.shared), message, groups)
            })
            .collect())
    }
}

impl SqsSourceBuilder {
    client_setters!();

    /// The queue (name or URL) poison messages are sent to, with their error in a
    /// `guestlist-error` attribute. Needed unless the queue has a redrive policy, which then
    /// takes precedence. It must exist.
    pub fn dead_letter(mut self, queue: &str) -> Self {
        self.dead_letter_queue = Some(queue.to_owned());
        self
    }

    /// Makes [`IdFrom::BrokerId`](guestlist_consumer::IdFrom::BrokerId) read the message
    /// attribute `name` instead of the SQS `MessageId`: for producers that set the event's own
    /// id there (a resent event gets a new `MessageId`).
    pub fn broker_id_attribute(mut self, name: &str) -> Self {
        self.id_attribute = Some(name.to_owned());
        self
    }

    /// Unwraps SNS notifications: for a queue subscribed to an SNS topic without raw message
    /// delivery. The payload is the notification's `Message` (the publisher's bytes), the
    /// broker id SNS's `MessageId`, and SNS's message attributes the headers. A body that is no
    /// SNS notification is taken as it is.
    pub fn sns_envelopes(mut self) -> Self {
        self.sns = true;
        self
    }

    /// The longest a fetch waits for a message (long polling, at most 20 s, the default).
    /// Shorter makes the consumer's shutdown quicker and costs more empty receives.
    pub fn wait_time(mut self, wait: Duration) -> Self {
        self.wait_time = wait.min(Duration::from_secs(20));
        self
    }

    /// Looks the queue up, with its visibility timeout, retention and redrive policy, and the
    /// dead-letter queue; refuses a queue that does not exist and a poison path that does not,
    /// and an endpoint that is no `http://` or `https://` URL.
    pub async fn connect(self) -> Result<SqsSource, Error> {
        let client = self.client_settings.connect().await?;
        let queue = Queue::find(&client, &self.queue).await?;
        let dead_letters = match (&queue.redrive, &self.dead_letter_queue) {
            (Some(redrive), named) => {
                tracing::info!(
                    queue = %queue.url,
                    target = %redrive.target,
                    max_receives = redrive.max_receives,
                    "the queue has a redrive policy: poison messages are left to it, and the \
                     consumer dead-letters at its maxReceiveCount"
                );
                if let Some(named) = named {
                    tracing::warn!(dead_letter_queue = %named, "the queue's redrive policy takes precedence over the dead-letter queue named");
                }
                DeadLetters::Redrive(redrive.clone())
            }
            (None, Some(named)) => {
                let target = Queue::find(&client, named).await?;
                DeadLetters::Queue {
                    url: target.url,
                    fifo: target.fifo,
                }
            }
            (None, None) => return Err(Error::NoDeadLetterQueue { queue: self.queue }),
        };
        Ok(SqsSource {
            shared: Arc::new(Shared {
                client,
                queue,
                dead_letters,
                id_attribute: self.id_attribute,
                sns: self.sns,
            }),
            wait_time: self.wait_time,
        })
    }
}

impl Source for SqsSource {
    type Delivery = SqsDelivery;

    async fn fetch(&mut self, max: usize) -> Result<Vec<SqsDelivery>, BoxError> {
        self.receive(max, self.wait_time).await
    }

    async fn fetch_ready(&mut self, max: usize) -> Result<Vec<SqsDelivery>, BoxError> {
        if max == 0 {
            return Ok(Vec::new());
        }
        self.receive(max, Duration::ZERO).await
    }

    fn ack_wait(&self) -> Option<Duration> {
        Some(self.shared.queue.visibility_timeout)
    }

    fn redelivery_horizon(&self) -> Option<Duration> {
        Some(self.shared.queue.retention)
    }

    fn max_deliveries(&self) -> Option<u32> {
        match &self.shared.dead_letters {
            DeadLetters::Redrive(redrive) => Some(redrive.max_receives),
            DeadLetters::Queue { .. } => None,
        }
    }
}
