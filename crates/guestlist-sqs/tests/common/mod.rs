//! Amazon SQS (moto, started by the test script): a queue per test with its visibility timeout
//! as the ack wait, and a dead-letter queue. The consumer suite runs on a standard queue (SQS
//! delivers at least once and drops nothing); the relay suite on a FIFO queue (each key's order
//! kept, repeats dropped by deduplication id).

#![allow(dead_code)] // each test binary uses the parts it needs
#![allow(unreachable_pub)] // a test crate has no public API

use std::collections::BTreeSet;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use guestlist_sqs::Client;
use guestlist_sqs::aws_sdk_sqs::types::{
    MessageSystemAttributeName, QueueAttributeName, SendMessageBatchRequestEntry,
};

use guestlist_testkit::brokers::{Broker, Received};

/// SQS: a queue per test, FIFO or standard, and a dead-letter queue.
pub struct SqsQueue<const FIFO: bool> {
    client: Client,
    name: String,
    url: String,
    dead_letters: String,
    sent: AtomicU64,
}

/// A standard queue.
pub type Sqs = SqsQueue<false>;
/// A FIFO queue.
pub type SqsFifo = SqsQueue<true>;

impl<const FIFO: bool> SqsQueue<FIFO> {
    const URL_VAR: &'static str = "GUESTLIST_TEST_SQS_ENDPOINT";

    fn endpoint() -> String {
        std::env::var(Self::URL_VAR).unwrap_or_else(|_| "http://127.0.0.1:5000".to_owned())
    }

    fn names(tag: &str) -> (String, String) {
        let base = format!("gl-{}", tag.replace('_', "-"));
        if FIFO {
            (format!("{base}.fifo"), format!("{base}-dead.fifo"))
        } else {
            (base.clone(), format!("{base}-dead"))
        }
    }

    async fn create(
        client: &Client,
        name: &str,
        attributes: &[(QueueAttributeName, String)],
    ) -> String {
        if let Ok(found) = client.get_queue_url().queue_name(name).send().await {
            let _ = client
                .delete_queue()
                .queue_url(found.queue_url.unwrap_or_default())
                .send()
                .await;
        }
        let mut create = client.create_queue().queue_name(name);
        if FIFO {
            create = create.attributes(QueueAttributeName::FifoQueue, "true");
        }
        for (name, value) in attributes {
            create = create.attributes(name.clone(), value);
        }
        create
            .send()
            .await
            .unwrap_or_else(|err| {
                panic!(
                    "SQS at {}: {}\nRun scripts/test.sh, which installs and starts every service the \
                     tests need (moto for SQS), or start `moto_server -p 5000`, or point {} at a \
                     running server.",
                    Self::endpoint(),
                    guestlist_sqs::aws_sdk_sqs::error::DisplayErrorContext(err),
                    Self::URL_VAR
                )
            })
            .queue_url
            .unwrap()
    }

    async fn open_with(tag: &str, attributes: &[(QueueAttributeName, String)]) -> Self {
        let client = guestlist_sqs::local_client(&Self::endpoint());
        let (name, dead) = Self::names(tag);
        let dead_letters = Self::create(&client, &dead, &[]).await;
        let url = Self::create(&client, &name, attributes).await;
        Self {
            client,
            name,
            url,
            dead_letters,
            sent: AtomicU64::new(0),
        }
    }

    /// The approximate counts of the queue's messages: waiting, in flight, delayed.
    async fn counts(&self) -> u64 {
        let names = [
            QueueAttributeName::ApproximateNumberOfMessages,
            QueueAttributeName::ApproximateNumberOfMessagesNotVisible,
            QueueAttributeName::ApproximateNumberOfMessagesDelayed,
        ];
        let found = self
            .client
            .get_queue_attributes()
            .queue_url(&self.url)
            .set_attribute_names(Some(names.to_vec()))
            .send()
            .await
            .expect("the queue's attributes")
            .attributes
            .unwrap_or_default();
        names
            .iter()
            .map(|name| {
                found
                    .get(name)
                    .and_then(|n| n.parse::<u64>().ok())
                    .unwrap_or(0)
            })
            .sum()
    }

    /// The client the test uses.
    pub fn client(&self) -> Client {
        self.client.clone()
    }

    /// The source, with a visibility of `visibility` on receive.
    pub async fn source_with(
        &self,
        build: impl FnOnce(guestlist_sqs::SqsSourceBuilder) -> guestlist_sqs::SqsSourceBuilder,
    ) -> guestlist_sqs::SqsSource {
        build(
            guestlist_sqs::SqsSource::builder(&self.url)
                .client(self.client.clone())
                .dead_letter(&self.dead_letters)
                .wait_time(Duration::from_secs(1)),
        )
        .connect()
        .await
        .expect("the queue")
    }

    /// A queue whose redrive policy moves a message to the dead-letter queue after
    /// `max_receives` receives.
    pub async fn open_redriven(tag: &str, max_receives: u32) -> Self {
        let client = guestlist_sqs::local_client(&Self::endpoint());
        let (_, dead) = Self::names(tag);
        let dead_letters = Self::create(&client, &dead, &[]).await;
        let arn = client
            .get_queue_attributes()
            .queue_url(&dead_letters)
            .attribute_names(QueueAttributeName::QueueArn)
            .send()
            .await
            .unwrap()
            .attributes
            .unwrap_or_default()
            .remove(&QueueAttributeName::QueueArn)
            .expect("the dead-letter queue's ARN");
        let policy =
            format!(r#"{{"deadLetterTargetArn":"{arn}","maxReceiveCount":{max_receives}}}"#);
        Self::open_with(
            tag,
            &[
                (QueueAttributeName::RedrivePolicy, policy),
                (QueueAttributeName::VisibilityTimeout, "30".to_owned()),
            ],
        )
        .await
    }

    /// Sends `body` with message attributes (on a FIFO queue, to the group `events`).
    pub async fn send(&self, body: &[u8], attributes: &[(&str, &str)]) {
        self.send_to_group(body, attributes, "events").await;
    }

    /// Sends `body` with message attributes, on a FIFO queue to the message group `group`.
    pub async fn send_to_group(&self, body: &[u8], attributes: &[(&str, &str)], group: &str) {
        let mut send = self
            .client
            .send_message()
            .queue_url(&self.url)
            .message_body(std::str::from_utf8(body).expect("the suite's payloads are text"));
        for (name, value) in attributes {
            let value = guestlist_sqs::aws_sdk_sqs::types::MessageAttributeValue::builder()
                .data_type("String")
                .string_value(*value)
                .build()
                .unwrap();
            send = send.message_attributes(*name, value);
        }
        if FIFO {
            // Every send is a message of its own: a fresh deduplication id each.
            let n = self.sent.fetch_add(1, Ordering::Relaxed);
            send = send
                .message_group_id(group)
                .message_deduplication_id(format!("{}-{n}", std::process::id()));
        }
        send.send().await.expect("SQS stored the message");
    }

    /// Receives every message the queue at `url` holds, `visibility` seconds invisible after;
    /// deleted too when `take`.
    async fn drain(
        &self,
        url: &str,
        visibility: i32,
        take: bool,
    ) -> Vec<guestlist_sqs::aws_sdk_sqs::types::Message> {
        let mut all = Vec::new();
        let mut seen = BTreeSet::new();
        let mut empty_rounds = 0;
        while empty_rounds < 2 && all.len() < 100_000 {
            let received = self
                .client
                .receive_message()
                .queue_url(url)
                .max_number_of_messages(10)
                .visibility_timeout(visibility)
                .message_attribute_names("All")
                .message_system_attribute_names(MessageSystemAttributeName::All)
                .send()
                .await
                .expect("receive")
                .messages
                .unwrap_or_default();
            let before = all.len();
            for message in received {
                let id = message.message_id.clone().unwrap_or_default();
                if take {
                    self.client
                        .delete_message()
                        .queue_url(url)
                        .receipt_handle(message.receipt_handle.clone().unwrap_or_default())
                        .send()
                        .await
                        .expect("delete");
                }
                if seen.insert(id) {
                    all.push(message);
                }
            }
            if all.len() == before {
                empty_rounds += 1;
            }
        }
        all
    }
}

/// The messages waiting on the queue at `url`.
async fn waiting(client: &Client, url: &str) -> u64 {
    client
        .get_queue_attributes()
        .queue_url(url)
        .attribute_names(QueueAttributeName::ApproximateNumberOfMessages)
        .send()
        .await
        .ok()
        .and_then(|found| found.attributes)
        .and_then(|found| {
            found
                .get(&QueueAttributeName::ApproximateNumberOfMessages)?
                .parse()
                .ok()
        })
        .unwrap_or(0)
}

/// A message attribute's text.
fn attribute(message: &guestlist_sqs::aws_sdk_sqs::types::Message, name: &str) -> Option<String> {
    message
        .message_attributes
        .as_ref()?
        .get(name)?
        .string_value
        .clone()
}

impl<const FIFO: bool> Broker for SqsQueue<FIFO> {
    type Source = guestlist_sqs::SqsSource;
    type Publisher = guestlist_sqs::SqsPublisher;
    const LABEL: &'static str = if FIFO { "SQS FIFO" } else { "SQS" };
    const DEDUPLICATES: bool = FIFO;
    const REPORTS_DUPLICATES: bool = false;
    const REDELIVERS_IN_TIME: bool = true;
    const MISSING_TOPIC_ADVICE: &'static str = "aws sqs create-queue";
    // A quarter of the default: moto takes about 70 a second, so that 5,000 took 68 to 80 s a
    // run, the longest tests of the suite; 2,500 still outlast the six kills (the story checks
    // that three or more land while events flow).
    const HOLDS_BACK_A_KEY: bool = FIFO;
    const CHAOS_EVENTS: usize = 2_500;
    // moto's FIFO queue checks each message sent against every one it holds: 10,000 held
    // would take it minutes per round of sends.
    const KEYS_STORY: (usize, usize) = (40, 10);
    // moto's FIFO queue checks each message sent against every one it holds.
    const RELAY_STORY_EVENTS: usize = 50;
    // The sharing story sized for moto: its FIFO queue checks each message sent against every
    // one it holds (about 200 ms for ten at 155 held), so 300 messages, not 20,000, and a lease
    // of 4 s that a round's publish of a relay's share outlasts only with its renewals.
    const SHARE_STORY: (usize, u64) = (300, 4_000);

    fn topic(&self) -> String {
        self.name.clone()
    }

    fn nowhere(&self, tag: &str) -> String {
        format!("gl-nowhere-{}", tag.replace('_', "-"))
    }

    fn program_args(&self) -> Vec<String> {
        vec![
            "--sqs".to_owned(),
            "--sqs-endpoint".to_owned(),
            Self::endpoint(),
        ]
    }

    async fn publisher(&self) -> guestlist_sqs::SqsPublisher {
        guestlist_sqs::SqsPublisher::builder()
            .client(self.client.clone())
            .connect()
            .await
            .expect("the relay's publisher")
    }

    async fn stored(&self) -> Option<usize> {
        Some(self.counts().await as usize)
    }

    async fn received(&self) -> Vec<Received> {
        self.drain(&self.url, 30, true)
            .await
            .iter()
            .map(|message| Received {
                id: attribute(message, guestlist_sqs::MESSAGE_ID_ATTRIBUTE).unwrap_or_default(),
                key: attribute(message, "guestlist-ordering-key"),
                seq: attribute(message, "guestlist-seq").map_or(0, |seq| seq.parse().unwrap()),
            })
            .collect()
    }

    async fn open(tag: &str, ack_wait: Duration) -> Self {
        let visibility = ack_wait.as_secs().max(1).to_string();
        Self::open_with(tag, &[(QueueAttributeName::VisibilityTimeout, visibility)]).await
    }

    async fn attach(tag: &str, _ack_wait: Duration) -> Self {
        let client = guestlist_sqs::local_client(&Self::endpoint());
        let (name, dead) = Self::names(tag);
        let url_of = |name: String| {
            let client = client.clone();
            async move {
                client
                    .get_queue_url()
                    .queue_name(name)
                    .send()
                    .await
                    .expect("the test's queue")
                    .queue_url
                    .unwrap()
            }
        };
        Self {
            url: url_of(name.clone()).await,
            dead_letters: url_of(dead).await,
            client,
            name,
            sent: AtomicU64::new(0),
        }
    }

    async fn horizon_stream(tag: &str) -> Self {
        let week = (7 * 86_400).to_string();
        Self::open_with(tag, &[(QueueAttributeName::MessageRetentionPeriod, week)]).await
    }

    async fn publish_with(&self, payload: &[u8], headers: &[(&str, &str)]) {
        self.send(payload, headers).await;
    }

    async fn publish_keyed(&self, payload: &[u8], header: &str, key: &str) {
        self.send_to_group(payload, &[(header, key)], key).await;
    }

    async fn publish_stream(&self, payloads: Vec<Vec<u8>>) -> usize {
        // moto scans a queue's every message on each receive: sent all at once, 5,000 messages
        // would slow it to a crawl. Ten to a request, as the consumers take them.
        let mut confirmed = 0;
        for (chunk, bodies) in payloads.chunks(10).enumerate() {
            let entries = bodies
                .iter()
                .enumerate()
                .map(|(n, body)| {
                    let mut entry = SendMessageBatchRequestEntry::builder()
                        .id(n.to_string())
                        .message_body(String::from_utf8_lossy(body));
                    if FIFO {
                        entry = entry
                            .message_group_id("events")
                            .message_deduplication_id(format!("{chunk}-{n}"));
                    }
                    entry.build().unwrap()
                })
                .collect();
            let sent = self
                .client
                .send_message_batch()
                .queue_url(&self.url)
                .set_entries(Some(entries))
                .send()
                .await
                .unwrap_or_else(|err| {
                    panic!(
                        "SQS did not take batch {chunk} of the stream ({confirmed} of {} sent): {}",
                        payloads.len(),
                        guestlist_sqs::aws_sdk_sqs::error::DisplayErrorContext(err)
                    )
                });
            assert!(
                sent.failed.is_empty(),
                "SQS refused {} of batch {chunk} ({confirmed} of {} sent): {:?}",
                sent.failed.len(),
                payloads.len(),
                sent.failed
            );
            confirmed += sent.successful.len();
            // Never more than fifty waiting: the stream lasts past the chaos story's kills,
            // and moto stays quick.
            while waiting(&self.client, &self.url).await > 50 {
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
        }
        confirmed
    }

    async fn missing(&self) -> String {
        guestlist_sqs::SqsSource::builder("gl-no-such-queue")
            .client(self.client.clone())
            .dead_letter(&self.dead_letters)
            .connect()
            .await
            .unwrap_err()
            .to_string()
    }

    async fn source(&self) -> guestlist_sqs::SqsSource {
        self.source_with(|builder| builder).await
    }

    fn url(&self) -> Option<String> {
        Some(Self::endpoint())
    }

    async fn source_at(&self, url: &str) -> Option<guestlist_sqs::SqsSource> {
        let client = guestlist_sqs::local_client(url);
        Some(self.source_with(|builder| builder.client(client)).await)
    }

    async fn publisher_at(&self, url: &str) -> Option<guestlist_sqs::SqsPublisher> {
        let publisher = guestlist_sqs::SqsPublisher::builder()
            .client(guestlist_sqs::local_client(url))
            .connect()
            .await
            .expect("the relay's publisher");
        Some(publisher)
    }

    async fn dead_letter_headers(&self) -> Vec<Vec<(String, String)>> {
        // Received and left visible (no take), so that the next look sees them again.
        self.drain(&self.dead_letters, 0, false)
            .await
            .iter()
            .map(|message| {
                let mut attributes: Vec<(String, String)> = message
                    .message_attributes
                    .iter()
                    .flatten()
                    .map(|(name, value)| {
                        (name.clone(), value.string_value.clone().unwrap_or_default())
                    })
                    .collect();
                attributes.sort();
                attributes
            })
            .collect()
    }

    async fn outstanding(&self) -> u64 {
        self.counts().await
    }

    async fn drained(&self) -> bool {
        self.counts().await == 0
    }
}
