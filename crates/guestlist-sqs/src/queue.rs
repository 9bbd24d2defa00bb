//! A queue's URL and the attributes the consumer checks at start-up.

use std::time::Duration;

use aws_sdk_sqs::Client;
use aws_sdk_sqs::types::QueueAttributeName;

use crate::Error;

/// What SQS says of a queue.
#[derive(Debug, Clone)]
pub(crate) struct Queue {
    pub(crate) url: String,
    /// How long a received message stays invisible.
    pub(crate) visibility_timeout: Duration,
    /// How long the queue keeps a message.
    pub(crate) retention: Duration,
    pub(crate) fifo: bool,
    /// The queue's own redrive policy, if it has one.
    pub(crate) redrive: Option<Redrive>,
}

/// A queue's redrive policy: after `max_receives` receives, SQS moves a message to `target`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Redrive {
    pub(crate) target: String,
    pub(crate) max_receives: u32,
}

/// The URL of `queue` (a name, or already a URL).
pub(crate) async fn url_of(client: &Client, queue: &str) -> Result<String, Error> {
    if queue.starts_with("https://") || queue.starts_with("http://") {
        return Ok(queue.to_owned());
    }
    match client.get_queue_url().queue_name(queue).send().await {
        Ok(found) => found.queue_url.ok_or_else(|| missing(queue)),
        Err(err)
            if err
                .as_service_error()
                .is_some_and(|e| e.is_queue_does_not_exist()) =>
        {
            Err(missing(queue))
        }
        Err(err) => Err(Error::sqs(err)),
    }
}

fn missing(queue: &str) -> Error {
    Error::MissingQueue {
        queue: queue.to_owned(),
    }
}

impl Queue {
    /// Looks `queue` up (a name or a URL); a queue that does not exist is
    /// [`Error::MissingQueue`].
    pub(crate) async fn find(client: &Client, queue: &str) -> Result<Self, Error> {
        let url = url_of(client, queue).await?;
        let found = client
            .get_queue_attributes()
            .queue_url(&url)
            .attribute_names(QueueAttributeName::All)
            .send()
            .await;
        let attributes = match found {
            Ok(found) => found.attributes.unwrap_or_default(),
            Err(err)
                if err
                    .as_service_error()
                    .is_some_and(|e| e.is_queue_does_not_exist()) =>
            {
                return Err(missing(queue));
            }
            Err(err) => return Err(Error::sqs(err)),
        };
        let seconds = |name: QueueAttributeName, default: u64| {
            attributes
                .get(&name)
                .and_then(|value| value.parse().ok())
                .map_or(Duration::from_secs(default), Duration::from_secs)
        };
        Ok(Self {
            visibility_timeout: seconds(QueueAttributeName::VisibilityTimeout, 30),
            retention: seconds(QueueAttributeName::MessageRetentionPeriod, 345_600),
            fifo: attributes
                .get(&QueueAttributeName::FifoQueue)
                .is_some_and(|value| value == "true")
                || url.ends_with(".fifo"),
            redrive: attributes
                .get(&QueueAttributeName::RedrivePolicy)
                .and_then(|policy| Redrive::parse(policy)),
            url,
        })
    }
}

impl Redrive {
    /// A redrive policy as SQS states it: `{"deadLetterTargetArn":"…","maxReceiveCount":5}`
    /// (the count sometimes a string).
    pub(crate) fn parse(policy: &str) -> Option<Self> {
        let policy: serde_json::Value = serde_json::from_str(policy).ok()?;
        let target = policy.get("deadLetterTargetArn")?.as_str()?.to_owned();
        let max_receives = match policy.get("maxReceiveCount")? {
            serde_json::Value::Number(n) => u32::try_from(n.as_u64()?).ok()?,
            serde_json::Value::String(s) => s.parse().ok()?,
            _ => return None,
        };
        Some(Self {
            target,
            max_receives,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::Redrive;

    #[test]
    fn a_redrive_policy_is_read_with_its_count_a_number_or_a_string() {
        let expected = Some(Redrive {
            target: "arn:aws:sqs:us-east-1:123456789012:orders-dlq".to_owned(),
            max_receives: 5,
        });
        assert_eq!(
            Redrive::parse(
                r#"{"deadLetterTargetArn":"arn:aws:sqs:us-east-1:123456789012:orders-dlq","maxReceiveCount":5}"#
            ),
            expected
        );
        assert_eq!(
            Redrive::parse(
                r#"{"deadLetterTargetArn":"arn:aws:sqs:us-east-1:123456789012:orders-dlq","maxReceiveCount":"5"}"#
            ),
            expected
        );
        assert_eq!(Redrive::parse(r#"{"maxReceiveCount":5}"#), None);
        assert_eq!(Redrive::parse("not json"), None);
    }
}
