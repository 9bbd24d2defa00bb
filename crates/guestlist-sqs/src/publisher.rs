//! The outbox relay's publisher on SQS: ten messages to a `SendMessageBatch`, the ordering key
//! as the FIFO message group, the message id as its deduplication id.

use std::collections::HashMap;
use std::sync::Mutex;

use aws_sdk_sqs::Client;
use aws_sdk_sqs::types::SendMessageBatchRequestEntry;
use guestlist_core::{Confirmed, OutboxMessage, Outcomes, Publish, PublishError};
use sha2::{Digest, Sha256};

use crate::client_settings::{ClientSettings, client_setters};
use crate::delivery::text;
use crate::{MESSAGE_ID_ATTRIBUTE, queue};

/// The most entries SQS takes in one `SendMessageBatch`, and attributes on one message.
const BATCH_LIMIT: usize = 10;
const ATTRIBUTE_LIMIT: usize = 10;
/// The largest message SQS takes: its body and its attributes' names, types and values.
const MAX_MESSAGE_BYTES: usize = 262_144;

/// Publishes the outbox's messages to SQS for the outbox's relay (`guestlist_sqlx::Relay`).
///
/// A message's topic names its queue (a name, looked up once, or a URL). Each message carries
/// its id in the `message-id` attribute ([`MESSAGE_ID_ATTRIBUTE`]: consume with
/// [`SqsSourceBuilder::broker_id_attribute`](crate::SqsSourceBuilder::broker_id_attribute)),
/// its ordering key and place in `guestlist-ordering-key` and `guestlist-seq`, and the headers
/// it was enqueued with (SQS takes ten attributes in all).
///
/// On a FIFO queue (`.fifo`) the ordering key is the `MessageGroupId`, so that a key's messages
/// keep their order, and the message id is the `MessageDeduplicationId` (its SHA-256 when it is
/// longer than SQS's 128 characters): a relay's repeat after a crash within SQS's five-minute
/// deduplication window is dropped by SQS. SQS does not say when it dropped one, so every
/// message counts as [`Confirmed::New`]. On a standard queue a repeat is a new message; the
/// consumer's inbox drops it.
#[derive(Debug)]
pub struct SqsPublisher {
    client: Client,
    /// Each topic's queue URL, once looked up.
    urls: Mutex<HashMap<String, String>>,
}

/// Settings for an [`SqsPublisher`]; [`connect`](Self::connect) makes its client.
#[derive(Debug, Clone, Default)]
#[must_use]
pub struct SqsPublisherBuilder {
    client_settings: ClientSettings,
}

impl SqsPublisher {
    /// Settings for a publisher on a client configured from the AWS environment, unless
    /// [`client`](SqsPublisherBuilder::client) hands one over.
    ///
    /// ```no_run
    /// # async fn run() -> Result<(), guestlist_sqs::Error> {
    /// let publisher = guestlist_sqs::SqsPublisher::builder()
    ///     .endpoint_url("http://127.0.0.1:5000")
    ///     .connect()
    ///     .await?;
    /// # let _ = publisher; Ok(()) }
    /// ```
    pub fn builder() -> SqsPublisherBuilder {
        SqsPublisherBuilder::default()
    }
}

impl SqsPublisherBuilder {
    client_setters!();

    /// Makes the client; refuses an endpoint that is no `http://` or `https://` URL.
    /// [`SqsPublisher::reachable`] checks that SQS answers.
    pub async fn connect(self) -> Result<SqsPublisher, crate::Error> {
        let client = self.client_settings.connect().await?;
        Ok(SqsPublisher {
            client,
            urls: Mutex::default(),
        })
    }
}

impl SqsPublisher {
    /// Lists one queue, waiting at most `wait`, so that an endpoint, a region or credentials
    /// that do not work fail at start, with what to check, not at the first message.
    pub async fn reachable(&self, wait: std::time::Duration) -> Result<(), crate::Error> {
        let asked = self.client.list_queues().max_results(1).send();
        match tokio::time::timeout(wait, asked).await {
            Ok(Ok(_)) => Ok(()),
            Ok(Err(err)) => Err(crate::Error::sqs(err)),
            Err(_) => Err(crate::Error::Unreachable { waited: wait }),
        }
    }

    async fn url_of(&self, topic: &str) -> Result<String, crate::Error> {
        if let Some(url) = self.lock().get(topic) {
            return Ok(url.clone());
        }
        let url = queue::url_of(&self.client, topic).await?;
        self.lock().insert(topic.to_owned(), url.clone());
        Ok(url)
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<String, String>> {
        self.urls
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// The batch entry for `message`, the `n`th of its request.
    fn entry(
        n: usize,
        message: &OutboxMessage,
        fifo: bool,
    ) -> Result<SendMessageBatchRequestEntry, PublishError> {
        let body = std::str::from_utf8(&message.payload).map_err(|_| {
            PublishError::unpublishable(
                "SQS message bodies are text: this payload is not UTF-8 (encode it, as base64 say, \
                 before it goes in the outbox)",
            )
        })?;
        let mut attributes = vec![(MESSAGE_ID_ATTRIBUTE, message.message_id.as_str())];
        let seq = message.seq.to_string();
        if let Some(key) = &message.ordering_key {
            attributes.push(("guestlist-ordering-key", key));
            attributes.push(("guestlist-seq", &seq));
        }
        attributes.extend(
            message
                .headers
                .iter()
                .map(|(n, v)| (n.as_str(), v.as_str())),
        );
        if attributes.len() > ATTRIBUTE_LIMIT {
            return Err(PublishError::unpublishable(format!(
                "SQS takes {ATTRIBUTE_LIMIT} message attributes and this message has {} with its \
                 id, ordering key and headers: enqueue it with fewer headers",
                attributes.len()
            )));
        }
        let mut entry = SendMessageBatchRequestEntry::builder()
            .id(n.to_string())
            .message_body(body);
        for (name, value) in attributes {
            entry = entry.message_attributes(name, text(value));
        }
        if fifo {
            let group = message
                .ordering_key
                .as_deref()
                .unwrap_or(&message.message_id);
            entry = entry
                .message_group_id(fitted(group))
                .message_deduplication_id(fitted(&message.message_id));
        }
        Ok(entry.build().expect("an id and a body are set"))
    }

    /// Sends `messages` (one queue's, at most ten) in one request: one outcome each.
    async fn send(
        &self,
        topic: &str,
        messages: &[&OutboxMessage],
    ) -> Vec<Result<Confirmed, PublishError>> {
        let url = match self.url_of(topic).await {
            Ok(url) => url,
            Err(err) => {
                let missing = matches!(err, crate::Error::MissingQueue { .. });
                let err = err.to_string();
                return messages
                    .iter()
                    .map(|_| {
                        // A queue may be created later: counted against the message. Anything
                        // else is the way to SQS.
                        Err(if missing {
                            PublishError::new(err.clone())
                        } else {
                            PublishError::outage(err.clone())
                        })
                    })
                    .collect();
            }
        };
        let fifo = url.ends_with(".fifo");
        let mut outcomes: Vec<Result<Confirmed, PublishError>> = Vec::with_capacity(messages.len());
        let mut entries = Vec::with_capacity(messages.len());
        for (n, message) in messages.iter().enumerate() {
            match Self::entry(n, message, fifo) {
                Ok(entry) => {
                    entries.push(entry);
                    outcomes.push(Ok(Confirmed::New));
                }
                Err(err) => outcomes.push(Err(err)),
            }
        }
        if entries.is_empty() {
            return outcomes;
        }
        match self
            .client
            .send_message_batch()
            .queue_url(&url)
            .set_entries(Some(entries))
            .send()
            .await
        {
            Ok(answer) => {
                for failed in answer.failed {
                    if let Some(outcome) = failed
                        .id
                        .parse::<usize>()
                        .ok()
                        .and_then(|n| outcomes.get_mut(n))
                    {
                        let why = format!(
                            "SQS refused the message: {} ({})",
                            failed.message.as_deref().unwrap_or("no reason given"),
                            failed.code
                        );
                        // SQS says whose fault it was: the message's, or its own.
                        *outcome = Err(if failed.sender_fault {
                            PublishError::new(why)
                        } else {
                            PublishError::outage(why)
                        });
                    }
                }
            }
            Err(err) => {
                let missing = err
                    .as_service_error()
                    .is_some_and(|e| e.is_queue_does_not_exist());
                let err = if missing {
                    crate::Error::MissingQueue {
                        queue: topic.to_owned(),
                    }
                    .to_string()
                } else {
                    crate::describe(err)
                };
                if missing {
                    self.lock().remove(topic);
                }
                for outcome in outcomes.iter_mut().filter(|o| o.is_ok()) {
                    *outcome = Err(if missing {
                        PublishError::new(err.clone())
                    } else {
                        PublishError::outage(err.clone())
                    });
                }
            }
        }
        outcomes
    }
}

/// `value` as SQS takes it for a group or deduplication id: itself when it is at most 128
/// printable ASCII characters, else its SHA-256 in hex.
fn fitted(value: &str) -> String {
    if value.len() <= 128 && value.bytes().all(|b| b.is_ascii_graphic()) {
        return value.to_owned();
    }
    hex::encode(Sha256::digest(value.as_bytes()))
}

impl Publish for SqsPublisher {
    fn check(&self, message: &OutboxMessage) -> Result<(), PublishError> {
        if message.ordering_key.as_deref() == Some("") {
            return Err(PublishError::unpublishable(
                "its ordering key is empty, and SQS refuses an empty message group: write NULL \
                 for a message with no key (key-less messages are grouped by their id)",
            ));
        }
        let body = std::str::from_utf8(&message.payload).map_err(|_| {
            PublishError::unpublishable(
                "SQS message bodies are text: this payload is not UTF-8 (encode it, as base64 \
                 say, before it goes in the outbox)",
            )
        })?;
        if let Some(c) = body.chars().find(|c| !sqs_takes(*c)) {
            return Err(PublishError::unpublishable(format!(
                "SQS refuses the character U+{:04X} in a message body: encode the payload \
                 (base64, say) before it goes in the outbox",
                u32::from(c)
            )));
        }
        let attributes: usize = [
            (MESSAGE_ID_ATTRIBUTE.len(), message.message_id.len()),
            (
                "guestlist-ordering-key".len(),
                message.ordering_key.as_ref().map_or(0, String::len),
            ),
        ]
        .into_iter()
        .chain(message.headers.iter().map(|(n, v)| (n.len(), v.len())))
        .map(|(name, value)| name + "String".len() + value)
        .sum();
        let size = message.payload.len() + attributes;
        if size > MAX_MESSAGE_BYTES {
            return Err(PublishError::unpublishable(format!(
                "it takes {size} bytes with its attributes, over SQS's {MAX_MESSAGE_BYTES}: \
                 send less, or a reference to the body stored elsewhere"
            )));
        }
        Ok(())
    }

    async fn publish(&self, messages: &[OutboxMessage], given: &mut Outcomes) {
        // Outcomes are given as each request is answered, side by side.
        let given = Mutex::new(given);
        let given_ref = &given;
        // A chain of requests per queue and message group (ordering key), run side by side:
        // within a chain, one request after another, so that a key's messages keep their order;
        // ten messages to a request.
        let mut chains: Vec<(&str, Option<&str>, Vec<usize>)> = Vec::new();
        for (n, message) in messages.iter().enumerate() {
            let group = message.ordering_key.as_deref();
            match chains
                .iter_mut()
                .find(|(topic, key, _)| *topic == message.topic && *key == group && group.is_some())
            {
                Some((_, _, members)) => members.push(n),
                None => chains.push((&message.topic, group, vec![n])),
            }
        }
        // Messages without a key have no order to keep: ten to a request, side by side.
        let mut requests: Vec<Vec<Vec<usize>>> = Vec::new();
        let mut unkeyed: Vec<(&str, Vec<usize>)> = Vec::new();
        for (topic, group, members) in chains {
            if group.is_some() {
                requests.push(members.chunks(BATCH_LIMIT).map(<[usize]>::to_vec).collect());
                continue;
            }
            match unkeyed
                .iter_mut()
                .find(|(t, batch)| *t == topic && batch.len() < BATCH_LIMIT)
            {
                Some((_, batch)) => batch.extend(members),
                None => unkeyed.push((topic, members)),
            }
        }
        requests.extend(unkeyed.into_iter().map(|(_, members)| vec![members]));
        let sent = futures_util::future::join_all(requests.into_iter().map(|chain| async move {
            let mut outcomes = Vec::new();
            let mut failed = false;
            for request in chain {
                if failed {
                    // Sent now, a later message would be stored before the one that failed,
                    // and FIFO deduplication would drop it when the relay sends it again after.
                    outcomes.extend(request.into_iter().map(|n| {
                        (
                            n,
                            Err(PublishError::outage(
                                "held back: an earlier message of its key was not confirmed",
                            )),
                        )
                    }));
                    continue;
                }
                let batch: Vec<&OutboxMessage> = request.iter().map(|n| &messages[*n]).collect();
                let answered = self.send(&batch[0].topic, &batch).await;
                failed = answered.iter().any(Result::is_err);
                let mut given = given_ref
                    .lock()
                    .unwrap_or_else(std::sync::PoisonError::into_inner);
                for (n, outcome) in request.into_iter().zip(answered) {
                    given.set(n, outcome);
                }
            }
            outcomes
        }))
        .await;
        let given = given
            .into_inner()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        for (n, outcome) in sent.into_iter().flatten() {
            given.set(n, outcome);
        }
    }
}

/// Whether SQS takes `c` in a message body: tab, line feed, carriage return, and the
/// characters from U+0020 up, but for the surrogates and U+FFFE, U+FFFF.
fn sqs_takes(c: char) -> bool {
    matches!(c, '\t' | '\n' | '\r' | '\u{20}'..='\u{D7FF}' | '\u{E000}'..='\u{FFFD}' | '\u{10000}'..)
}

#[cfg(test)]
mod tests {
    use super::fitted;

    #[test]
    fn a_long_or_unprintable_id_is_hashed_to_fit() {
        assert_eq!(fitted("evt_1"), "evt_1");
        let long = "x".repeat(129);
        assert_eq!(fitted(&long).len(), 64);
        assert_eq!(fitted("caf\u{e9}").len(), 64);
        assert_ne!(fitted(&long), fitted(&"x".repeat(130)));
    }
}
