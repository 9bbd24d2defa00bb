//! One received message, and what settling it does on SQS.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use aws_sdk_sqs::types::{
    ChangeMessageVisibilityBatchRequestEntry, DeleteMessageBatchRequestEntry,
    MessageAttributeValue, MessageSystemAttributeName,
};
use guestlist_consumer::{BoxError, Delivery};

use crate::ERROR_ATTRIBUTE;
use crate::envelope::Envelope;
use crate::fifo::Groups;
use crate::shared::{DeadLetters, Shared};

/// The most entries SQS takes in one batch request.
const BATCH_LIMIT: usize = 10;
/// The longest visibility timeout SQS sets: 12 hours.
const MAX_VISIBILITY: Duration = Duration::from_secs(43_200);
/// How often a failed delete is tried again before it is reported.
const DELETE_RETRIES: usize = 2;

/// One message received from an SQS queue. A handler reaches it with
/// [`Message::delivery`](guestlist_consumer::Message::delivery), for SQS's own details
/// ([`sqs_message_id`](Self::sqs_message_id), [`group`](Self::group),
/// [`receive_count`](Self::receive_count)).
pub struct SqsDelivery {
    shared: Arc<Shared>,
    sqs_id: String,
    receipt: String,
    /// The body as received (an SNS envelope included).
    body: String,
    /// SNS's notification, when the body is one and the source unwraps them.
    envelope: Option<Envelope>,
    attributes: HashMap<String, String>,
    receive_count: u32,
    group: Option<String>,
    /// Its receive's message groups and its place in them (FIFO queues).
    groups: Option<(Arc<Groups>, usize)>,
}

impl std::fmt::Debug for SqsDelivery {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SqsDelivery")
            .field("message_id", &self.sqs_id)
            .field("receive_count", &self.receive_count)
            .field("group", &self.group)
            .finish_non_exhaustive()
    }
}

impl SqsDelivery {
    pub(crate) fn new(
        shared: Arc<Shared>,
        message: aws_sdk_sqs::types::Message,
        groups: Option<(Arc<Groups>, usize)>,
    ) -> Self {
        let system = message.attributes.unwrap_or_default();
        let attributes = message
            .message_attributes
            .unwrap_or_default()
            .into_iter()
            .filter_map(|(name, value)| Some((name, value.string_value?)))
            .collect();
        let body = message.body.unwrap_or_default();
        let envelope = if shared.sns {
            Envelope::unwrap(body.as_bytes())
        } else {
            None
        };
        Self {
            sqs_id: message.message_id.unwrap_or_default(),
            receipt: message.receipt_handle.unwrap_or_default(),
            receive_count: system
                .get(&MessageSystemAttributeName::ApproximateReceiveCount)
                .and_then(|count| count.parse().ok())
                .unwrap_or(1),
            group: system
                .get(&MessageSystemAttributeName::MessageGroupId)
                .cloned(),
            shared,
            body,
            envelope,
            attributes,
            groups,
        }
    }

    /// The message's receipt handle, for settling it.
    pub(crate) fn receipt(&self) -> &str {
        &self.receipt
    }

    /// SQS's id of the message (each copy SNS delivers is a message of its own).
    pub fn sqs_message_id(&self) -> &str {
        &self.sqs_id
    }

    /// SQS's `ApproximateReceiveCount`: how many times the message was received, this time
    /// included.
    pub fn receive_count(&self) -> u32 {
        self.receive_count
    }

    /// Its FIFO message group, on a FIFO queue.
    pub fn group(&self) -> Option<&str> {
        self.group.as_deref()
    }

    /// Sets how long the message stays invisible, from now.
    async fn set_visibility(&self, visibility: Duration) -> Result<(), BoxError> {
        self.shared
            .client
            .change_message_visibility()
            .queue_url(&self.shared.queue.url)
            .receipt_handle(&self.receipt)
            .visibility_timeout(seconds(visibility))
            .send()
            .await
            .map_err(crate::describe)?;
        Ok(())
    }

    /// Sends the message to the dead-letter queue at `url`, with `reason`, then deletes it.
    async fn send_to(&self, url: &str, fifo: bool, reason: &str) -> Result<(), BoxError> {
        let mut send = self
            .shared
            .client
            .send_message()
            .queue_url(url)
            .message_body(&self.body)
            .message_attributes(ERROR_ATTRIBUTE, text(truncated(reason, 4096)));
        // SQS takes ten attributes: the error first, then as many of the message's own as fit.
        let mut own: Vec<_> = self.attributes.iter().collect();
        own.sort();
        for (name, value) in own
            .into_iter()
            .filter(|(name, _)| *name != ERROR_ATTRIBUTE)
            .take(9)
        {
            send = send.message_attributes(name, text(value));
        }
        if fifo {
            send = send
                .message_group_id(self.group.as_deref().unwrap_or("guestlist-dead-letters"))
                .message_deduplication_id(&self.sqs_id);
        }
        send.send().await.map_err(crate::describe)?;
        self.ack().await
    }
}

/// A visibility timeout in whole seconds (SQS's unit), rounded to the nearest, within SQS's
/// bounds: a delay under half a second makes the message visible at once.
fn seconds(visibility: Duration) -> i32 {
    let visibility = visibility.min(MAX_VISIBILITY);
    let whole = visibility.as_secs() + u64::from(visibility.subsec_millis() >= 500);
    i32::try_from(whole).unwrap_or(i32::MAX)
}

/// A string message attribute.
pub(crate) fn text(value: &str) -> MessageAttributeValue {
    MessageAttributeValue::builder()
        .data_type("String")
        .string_value(value)
        .build()
        .expect("a data type is set")
}

/// `text` cut to at most `limit` bytes, on a character boundary.
fn truncated(text: &str, limit: usize) -> &str {
    if text.len() <= limit {
        return text;
    }
    let mut end = limit;
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    &text[..end]
}

impl Delivery for SqsDelivery {
    fn payload(&self) -> &[u8] {
        match &self.envelope {
            Some(envelope) => &envelope.payload,
            None => self.body.as_bytes(),
        }
    }

    fn header(&self, name: &str) -> Option<&str> {
        let from_sns = self.envelope.as_ref().and_then(|e| e.attributes.get(name));
        from_sns
            .or_else(|| self.attributes.get(name))
            .map(String::as_str)
    }

    fn headers(&self) -> Vec<(String, String)> {
        let mut all: Vec<(String, String)> = self
            .attributes
            .iter()
            .map(|(name, value)| (name.clone(), value.clone()))
            .collect();
        if let Some(envelope) = &self.envelope {
            // SNS's attributes first: they win over the queue's own of the same name.
            let from_sns: Vec<(String, String)> = envelope
                .attributes
                .iter()
                .map(|(name, value)| (name.clone(), value.clone()))
                .collect();
            all.retain(|(name, _)| !envelope.attributes.contains_key(name));
            all.extend(from_sns);
        }
        // The maps keep no order: sorted by name, so that it reads the same every time.
        all.sort();
        all
    }

    fn key(&self) -> Option<String> {
        self.group.clone()
    }

    fn counts_withdrawn(&self) -> bool {
        true // every receive raises ApproximateReceiveCount, a withdrawn one's too
    }

    fn return_topic(&self) -> Option<String> {
        Some(self.shared.queue.url.clone())
    }

    fn broker_id(&self) -> Option<&str> {
        if let Some(attribute) = &self.shared.id_attribute {
            return self.header(attribute);
        }
        match &self.envelope {
            Some(envelope) => Some(&envelope.message_id),
            None => Some(&self.sqs_id),
        }
    }

    fn delivery_count(&self) -> u32 {
        self.receive_count
    }

    async fn ack(&self) -> Result<(), BoxError> {
        self.shared
            .client
            .delete_message()
            .queue_url(&self.shared.queue.url)
            .receipt_handle(&self.receipt)
            .send()
            .await
            .map_err(crate::describe)?;
        Ok(())
    }

    async fn ack_all(deliveries: &[&Self]) -> Result<(), BoxError> {
        let Some(first) = deliveries.first() else {
            return Ok(());
        };
        let receipts: Vec<&str> = deliveries.iter().map(|d| d.receipt()).collect();
        delete_all(&first.shared, &receipts).await
    }

    async fn nak(&self, delay: Duration) -> Result<(), BoxError> {
        // On a FIFO queue the later messages of its group in this receive go back with it,
        // for as long, so that the group comes again in its order.
        if let Some((groups, place)) = &self.groups {
            let later = groups.hand_back(*place);
            change_visibility(&self.shared, &later, delay).await?;
        }
        self.set_visibility(delay).await
    }

    async fn dead_letter(&self, reason: &str) -> Result<(), BoxError> {
        match &self.shared.dead_letters {
            DeadLetters::Queue { url, fifo } => self.send_to(url, *fifo, reason).await,
            DeadLetters::Redrive(redrive) => {
                // SQS moves it to the policy's target on its next receive, past maxReceiveCount:
                // visible now, so that the receive comes soon.
                tracing::warn!(
                    message_id = %self.sqs_id,
                    target = %redrive.target,
                    reason,
                    "leaving a poison message to the queue's redrive policy"
                );
                self.set_visibility(Duration::ZERO).await
            }
        }
    }

    async fn keep_alive(&self) -> Result<(), BoxError> {
        self.set_visibility(self.shared.queue.visibility_timeout)
            .await
    }

    fn withdrawn(&self) -> bool {
        self.groups
            .as_ref()
            .is_some_and(|(groups, place)| groups.withdrawn(*place))
    }
}

/// Deletes the messages of `receipts`, ten to a request; the entries SQS failed are tried
/// again, then reported.
pub(crate) async fn delete_all(shared: &Shared, receipts: &[&str]) -> Result<(), BoxError> {
    let mut failures = Vec::new();
    for chunk in receipts.chunks(BATCH_LIMIT) {
        let mut left: Vec<&str> = chunk.to_vec();
        for attempt in 0..=DELETE_RETRIES {
            let entries = left
                .iter()
                .enumerate()
                .map(|(n, receipt)| {
                    DeleteMessageBatchRequestEntry::builder()
                        .id(n.to_string())
                        .receipt_handle(*receipt)
                        .build()
                        .expect("an id and a receipt handle are set")
                })
                .collect();
            let answer = shared
                .client
                .delete_message_batch()
                .queue_url(&shared.queue.url)
                .set_entries(Some(entries))
                .send()
                .await;
            let failed = match answer {
                Ok(answer) => answer.failed,
                Err(err) if attempt < DELETE_RETRIES => {
                    tracing::debug!(error = %crate::describe(err), "a delete batch failed; trying it again");
                    continue;
                }
                Err(err) => {
                    failures.push(format!("{} deletes: {}", left.len(), crate::describe(err)));
                    break;
                }
            };
            if failed.is_empty() {
                break;
            }
            let retry: Vec<&str> = failed
                .iter()
                .filter_map(|entry| entry.id.parse::<usize>().ok())
                .filter_map(|n| left.get(n).copied())
                .collect();
            if attempt == DELETE_RETRIES {
                failures.extend(failed.iter().map(|entry| {
                    format!(
                        "{}: {}",
                        entry.code,
                        entry.message.as_deref().unwrap_or("no message")
                    )
                }));
                break;
            }
            left = retry;
        }
    }
    if failures.is_empty() {
        return Ok(());
    }
    Err(format!(
        "SQS did not delete {} message(s) after {DELETE_RETRIES} retries ({}); they come back after \
         their visibility timeout and the inbox answers them as duplicates",
        failures.len(),
        failures.join("; ")
    )
    .into())
}

/// Sets the visibility of the messages of `receipts` to `visibility`, ten to a request.
async fn change_visibility(
    shared: &Shared,
    receipts: &[String],
    visibility: Duration,
) -> Result<(), BoxError> {
    for chunk in receipts.chunks(BATCH_LIMIT) {
        let entries = chunk
            .iter()
            .enumerate()
            .map(|(n, receipt)| {
                ChangeMessageVisibilityBatchRequestEntry::builder()
                    .id(n.to_string())
                    .receipt_handle(receipt)
                    .visibility_timeout(seconds(visibility))
                    .build()
                    .expect("an id and a receipt handle are set")
            })
            .collect();
        let answer = shared
            .client
            .change_message_visibility_batch()
            .queue_url(&shared.queue.url)
            .set_entries(Some(entries))
            .send()
            .await
            .map_err(crate::describe)?;
        if let Some(failed) = answer.failed.first() {
            return Err(format!(
                "SQS did not hand {} message(s) back: {}",
                answer.failed.len(),
                failed.message.as_deref().unwrap_or(&failed.code)
            )
            .into());
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::{seconds, truncated};

    #[test]
    fn visibility_is_rounded_to_whole_seconds_within_twelve_hours() {
        assert_eq!(seconds(Duration::ZERO), 0);
        assert_eq!(seconds(Duration::from_millis(50)), 0);
        assert_eq!(seconds(Duration::from_millis(500)), 1);
        assert_eq!(seconds(Duration::from_millis(1499)), 1);
        assert_eq!(seconds(Duration::from_millis(2000)), 2);
        assert_eq!(seconds(Duration::from_secs(86_400)), 43_200);
    }

    #[test]
    fn a_long_reason_is_cut_on_a_character_boundary() {
        assert_eq!(truncated("abc", 10), "abc");
        assert_eq!(truncated("caf\u{e9}", 4), "caf");
    }
}
