//! The brokers the suite runs on, each behind the same small API.

use std::future::Future;
use std::time::Duration;

use guestlist_consumer::Source;

/// A broker with one test's queue (or stream) and dead-letter place.
pub trait Broker: Send + Sync + Sized + 'static {
    type Source: Source;
    /// The outbox relay's publisher to this broker.
    type Publisher: guestlist_sqlx::Publish + 'static;
    const LABEL: &'static str;
    /// Whether the broker drops a repeated message id on its own.
    const DEDUPLICATES: bool;
    /// Whether the publisher learns that the broker dropped a repeat (not SQS FIFO's).
    const REPORTS_DUPLICATES: bool = Self::DEDUPLICATES;
    /// Publishes in the chaos test: fewer where each publish is slow to make (SQS).
    const CHAOS_EVENTS: usize = 10_000;
    /// Whether the broker redelivers an unacknowledged message after a wait, and bounds
    /// redeliveries in time (JetStream's ack wait and max age; not RabbitMQ, not Kafka).
    const REDELIVERS_IN_TIME: bool;
    /// What the relay's error says to do about a topic the broker takes nowhere.
    const MISSING_TOPIC_ADVICE: &'static str;

    /// A fresh queue for the test `tag`; `ack_wait` where the broker has one.
    /// Whether a topic the broker takes nowhere ([`Broker::nowhere`]) is refused for good
    /// (an invalid name), rather than until a queue or stream appears for it.
    const NOWHERE_FOR_GOOD: bool = false;
    /// A body the broker never takes, in bytes; `None` where that is more than every database
    /// here holds in one statement (RabbitMQ's 16 MiB): such a broker is given a header name
    /// it cannot carry instead.
    const TOO_LARGE: Option<usize> = Some(1_100_000);
    /// Messages a relay story publishes beside the one it refuses, on PostgreSQL (a fifth of
    /// it elsewhere).
    const RELAY_STORY_EVENTS: usize = 1_000;
    fn open(tag: &str, ack_wait: Duration) -> impl Future<Output = Self> + Send;
    /// The same queue, from another process.
    fn attach(tag: &str, ack_wait: Duration) -> impl Future<Output = Self> + Send;
    /// The header (message attribute) a dead letter's error is in.
    const ERROR_HEADER: &'static str = "guestlist-error";
    /// Publishes `payload`, waiting for the broker to confirm.
    fn publish(&self, payload: &[u8]) -> impl Future<Output = ()> + Send {
        self.publish_with(payload, &[])
    }
    /// Publishes `payload` with `headers` (name and text value; message attributes on SQS),
    /// waiting for the broker to confirm.
    fn publish_with(
        &self,
        payload: &[u8],
        headers: &[(&str, &str)],
    ) -> impl Future<Output = ()> + Send;
    /// Publishes many events for a chaos test: all of them before it returns, by default. A
    /// broker that slows down as its queue grows (moto's SQS) publishes them from a task
    /// instead, while the consumers run, so that the queue stays short.
    fn publish_stream(&self, payloads: Vec<Vec<u8>>) -> impl Future<Output = ()> + Send {
        async move {
            for payload in payloads {
                self.publish(&payload).await;
            }
        }
    }
    /// A consumer's source on the queue.
    fn source(&self) -> impl Future<Output = Self::Source> + Send;
    /// Messages in the dead-letter place, with the error each carries.
    fn dead_letters(&self) -> impl Future<Output = Vec<String>> + Send {
        async {
            self.dead_letter_headers()
                .await
                .into_iter()
                .map(|headers| header_of(&headers, Self::ERROR_HEADER).unwrap_or_default())
                .collect()
        }
    }
    /// The headers (message attributes) of each message in the dead-letter place, in order.
    fn dead_letter_headers(&self) -> impl Future<Output = Vec<Vec<(String, String)>>> + Send;
    /// Messages waiting, and (where the broker says so cheaply) delivered but unacknowledged.
    fn outstanding(&self) -> impl Future<Output = u64> + Send;
    /// `true` when no message waits and none is delivered but unacknowledged (exact, maybe slow).
    fn drained(&self) -> impl Future<Output = bool> + Send;
    /// A queue (stream) with a redelivery horizon of a week, where the broker has one.
    fn horizon_stream(tag: &str) -> impl Future<Output = Self> + Send;
    /// The error a consumer of a queue (stream) that does not exist gets.
    fn missing(&self) -> impl Future<Output = String> + Send;
    /// The topic an outbox message needs to reach the test's queue (stream).
    fn topic(&self) -> String;
    /// A topic the broker takes nowhere: no stream captures it, no queue is bound to it.
    fn nowhere(&self, tag: &str) -> String {
        format!("gl.nowhere.{tag}")
    }
    /// A relay's publisher to the test's queue (stream).
    fn publisher(&self) -> impl Future<Output = Self::Publisher> + Send;
    /// How many messages the queue (stream) holds, where that can be read without taking them
    /// off it (not on RabbitMQ).
    fn stored(&self) -> impl Future<Output = Option<usize>> + Send {
        async { None }
    }
    /// Every message on the queue (stream), in the order the broker holds them; RabbitMQ's are
    /// taken off the queue.
    fn received(&self) -> impl Future<Output = Vec<Received>> + Send;
}

/// The value of the header `name` among `headers`.
pub fn header_of(headers: &[(String, String)], name: &str) -> Option<String> {
    headers
        .iter()
        .find(|(n, _)| n == name)
        .map(|(_, value)| value.clone())
}

/// A message as a relay published it: its id, ordering key and place.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Received {
    pub id: String,
    pub key: Option<String>,
    pub seq: i64,
}

/// NATS JetStream: a stream per test, a durable pull consumer, a dead-letter stream.
pub struct Nats {
    context: async_nats::jetstream::Context,
    stream: String,
    subject: String,
    dead_letters: String,
    dead_letter_stream: String,
    ack_wait: Duration,
    url: String,
}

impl Nats {
    const URL_VAR: &'static str = "GUESTLIST_TEST_NATS_URL";

    async fn connect(tag: &str, ack_wait: Duration) -> Self {
        let url =
            std::env::var(Self::URL_VAR).unwrap_or_else(|_| "nats://127.0.0.1:4222".to_owned());
        let client = async_nats::connect(&url).await.unwrap_or_else(|err| {
            panic!(
                "NATS at {url}: {err}\nRun scripts/test.sh, which installs and starts every service the \
                 tests need, or start it with `nats-server -a 127.0.0.1 -p 4222 -js`, or point {} at a \
                 running server.",
                Self::URL_VAR
            )
        });
        let tag = tag.to_uppercase();
        Self {
            context: async_nats::jetstream::new(client),
            stream: format!("GL_{tag}"),
            subject: format!("gl.{tag}.events"),
            dead_letters: format!("gl.{tag}.dead"),
            dead_letter_stream: format!("GL_{tag}_DEAD"),
            ack_wait,
            url,
        }
    }

    async fn create(&self, max_age: Duration) {
        use async_nats::jetstream::stream::Config;
        for stream in [&self.stream, &self.dead_letter_stream] {
            let _ = self.context.delete_stream(stream).await;
        }
        self.context
            .create_stream(Config {
                name: self.stream.clone(),
                subjects: vec![self.subject.clone()],
                max_age,
                ..Default::default()
            })
            .await
            .expect("create the stream");
        self.context
            .create_stream(Config {
                name: self.dead_letter_stream.clone(),
                subjects: vec![self.dead_letters.clone()],
                ..Default::default()
            })
            .await
            .expect("create the dead-letter stream");
    }
}

impl Broker for Nats {
    type Source = guestlist_nats::JetStreamSource;
    type Publisher = guestlist_nats::JetStreamPublisher;
    const LABEL: &'static str = "NATS JetStream";
    const DEDUPLICATES: bool = true;
    const REDELIVERS_IN_TIME: bool = true;
    const MISSING_TOPIC_ADVICE: &'static str = "nats stream add";
    const ERROR_HEADER: &'static str = "Guestlist-Error";

    fn topic(&self) -> String {
        self.subject.clone()
    }

    async fn publisher(&self) -> guestlist_nats::JetStreamPublisher {
        guestlist_nats::JetStreamPublisher::new(self.context.clone())
    }

    async fn stored(&self) -> Option<usize> {
        Some(self.received().await.len())
    }

    async fn received(&self) -> Vec<Received> {
        let mut stream = self.context.get_stream(&self.stream).await.unwrap();
        let state = stream.info().await.unwrap().state.clone();
        let mut received = Vec::new();
        for sequence in state.first_sequence..=state.last_sequence {
            if state.messages == 0 {
                break;
            }
            let message = stream.get_raw_message(sequence).await.unwrap();
            let header = |name: &str| message.headers.get(name).map(|v| v.as_str().to_owned());
            received.push(Received {
                id: header("Nats-Msg-Id").unwrap_or_default(),
                key: header("Guestlist-Ordering-Key"),
                seq: header("Guestlist-Seq").map_or(0, |seq| seq.parse().unwrap()),
            });
        }
        received
    }

    async fn open(tag: &str, ack_wait: Duration) -> Self {
        let nats = Self::connect(tag, ack_wait).await;
        nats.create(Duration::ZERO).await;
        nats
    }

    async fn attach(tag: &str, ack_wait: Duration) -> Self {
        Self::connect(tag, ack_wait).await
    }

    async fn horizon_stream(tag: &str) -> Self {
        let nats = Self::connect(tag, Duration::from_secs(30)).await;
        nats.create(Duration::from_secs(7 * 24 * 3600)).await;
        nats
    }

    async fn publish_with(&self, payload: &[u8], headers: &[(&str, &str)]) {
        let mut map = async_nats::HeaderMap::new();
        for (name, value) in headers {
            map.insert(*name, *value);
        }
        self.context
            .publish_with_headers(self.subject.clone(), map, payload.to_vec().into())
            .await
            .expect("publish")
            .await
            .expect("the stream stored it");
    }

    async fn missing(&self) -> String {
        guestlist_nats::JetStreamSource::builder(&self.url, "GL_NO_SUCH_STREAM", "warehouse")
            .ack_wait(self.ack_wait)
            .dead_letter(&self.dead_letters)
            .connect()
            .await
            .unwrap_err()
            .to_string()
    }

    async fn source(&self) -> guestlist_nats::JetStreamSource {
        guestlist_nats::JetStreamSource::builder(&self.url, &self.stream, "warehouse")
            .ack_wait(self.ack_wait)
            .dead_letter(&self.dead_letters)
            .connect()
            .await
            .expect("bind the consumer")
    }

    async fn dead_letter_headers(&self) -> Vec<Vec<(String, String)>> {
        let mut stream = self
            .context
            .get_stream(&self.dead_letter_stream)
            .await
            .unwrap();
        let count = stream.info().await.unwrap().state.messages;
        let mut all = Vec::new();
        for sequence in 1..=count {
            let message = stream.get_raw_message(sequence).await.unwrap();
            let headers = message
                .headers
                .iter()
                .flat_map(|(name, values)| {
                    values
                        .iter()
                        .map(move |value| (name.to_string(), value.as_str().to_owned()))
                })
                .collect();
            all.push(headers);
        }
        all
    }

    async fn outstanding(&self) -> u64 {
        let mut stream = self.context.get_stream(&self.stream).await.unwrap();
        match stream.consumer_info("warehouse").await {
            Ok(info) => info.num_pending + info.num_ack_pending as u64,
            Err(_) => stream.info().await.unwrap().state.messages,
        }
    }

    async fn drained(&self) -> bool {
        self.outstanding().await == 0
    }
}

/// RabbitMQ: a quorum queue per test (it counts deliveries), a dead-letter exchange and queue.
pub struct Rabbit {
    channel: lapin::Channel,
    queue: String,
    dead_letters: String,
    url: String,
}

impl Rabbit {
    const URL_VAR: &'static str = "GUESTLIST_TEST_AMQP_URL";

    async fn connect(tag: &str) -> Self {
        let url = std::env::var(Self::URL_VAR)
            .unwrap_or_else(|_| "amqp://guest:guest@127.0.0.1:5672/%2f".to_owned());
        let connection = lapin::Connection::connect(&url, lapin::ConnectionProperties::default())
            .await
            .unwrap_or_else(|err| {
                panic!(
                    "RabbitMQ at {url}: {err}\nRun scripts/test.sh, which installs and starts every \
                     service the tests need, or start it with `rabbitmq-server -detached`, or point {} \
                     at a running server.",
                    Self::URL_VAR
                )
            });
        let channel = connection.create_channel().await.unwrap();
        channel
            .confirm_select(lapin::options::ConfirmSelectOptions::default())
            .await
            .unwrap();
        Self {
            channel,
            queue: format!("gl.{tag}"),
            dead_letters: format!("gl.{tag}.dead"),
            url,
        }
    }

    async fn count(&self, queue: &str) -> u64 {
        let declared = self
            .channel
            .queue_declare(
                queue.into(),
                lapin::options::QueueDeclareOptions {
                    passive: true,
                    ..Default::default()
                },
                Default::default(),
            )
            .await
            .unwrap();
        u64::from(declared.message_count())
    }
}

impl Broker for Rabbit {
    type Source = guestlist_amqp::RabbitSource;
    type Publisher = guestlist_amqp::RabbitPublisher;
    const LABEL: &'static str = "RabbitMQ";
    const DEDUPLICATES: bool = false;
    const REDELIVERS_IN_TIME: bool = false;
    const MISSING_TOPIC_ADVICE: &'static str = "bind a queue";
    const TOO_LARGE: Option<usize> = None;

    fn topic(&self) -> String {
        self.queue.clone()
    }

    async fn publisher(&self) -> guestlist_amqp::RabbitPublisher {
        guestlist_amqp::RabbitPublisher::builder(&self.url)
            .connect()
            .await
            .expect("the relay's publisher connects")
    }

    async fn received(&self) -> Vec<Received> {
        use lapin::options::BasicGetOptions;
        use lapin::types::AMQPValue;
        let mut received = Vec::new();
        let take = BasicGetOptions { no_ack: true };
        while let Some(message) = self
            .channel
            .basic_get(self.queue.as_str().into(), take)
            .await
            .unwrap()
        {
            let properties = &message.delivery.properties;
            let header = |name: &str| {
                properties
                    .headers()
                    .as_ref()
                    .and_then(|h| h.inner().get(name).cloned())
            };
            received.push(Received {
                id: properties
                    .message_id()
                    .as_ref()
                    .map(|id| id.to_string())
                    .unwrap_or_default(),
                key: match header("guestlist-ordering-key") {
                    Some(AMQPValue::LongString(key)) => {
                        Some(String::from_utf8_lossy(key.as_bytes()).into_owned())
                    }
                    _ => None,
                },
                seq: match header("guestlist-seq") {
                    Some(AMQPValue::LongLongInt(seq)) => seq,
                    _ => 0,
                },
            });
        }
        received
    }

    async fn open(tag: &str, _ack_wait: Duration) -> Self {
        use lapin::options::{
            ExchangeDeclareOptions, QueueBindOptions, QueueDeclareOptions, QueueDeleteOptions,
        };
        use lapin::types::{AMQPValue, FieldTable, LongString};
        let rabbit = Self::connect(tag).await;
        for queue in [&rabbit.queue, &rabbit.dead_letters] {
            let _ = rabbit
                .channel
                .queue_delete(queue.as_str().into(), QueueDeleteOptions::default())
                .await;
        }
        let durable = QueueDeclareOptions {
            durable: true,
            ..Default::default()
        };
        let mut quorum = FieldTable::default();
        quorum.insert(
            "x-queue-type".into(),
            AMQPValue::LongString(LongString::from("quorum")),
        );
        rabbit
            .channel
            .queue_declare(rabbit.queue.as_str().into(), durable, quorum)
            .await
            .expect("declare the quorum queue");
        rabbit
            .channel
            .exchange_declare(
                rabbit.dead_letters.as_str().into(),
                lapin::ExchangeKind::Fanout,
                ExchangeDeclareOptions {
                    durable: true,
                    ..Default::default()
                },
                FieldTable::default(),
            )
            .await
            .unwrap();
        rabbit
            .channel
            .queue_declare(
                rabbit.dead_letters.as_str().into(),
                durable,
                FieldTable::default(),
            )
            .await
            .unwrap();
        rabbit
            .channel
            .queue_bind(
                rabbit.dead_letters.as_str().into(),
                rabbit.dead_letters.as_str().into(),
                "".into(),
                QueueBindOptions::default(),
                FieldTable::default(),
            )
            .await
            .unwrap();
        rabbit
    }

    async fn attach(tag: &str, _ack_wait: Duration) -> Self {
        Self::connect(tag).await
    }

    async fn horizon_stream(tag: &str) -> Self {
        Self::open(tag, Duration::from_secs(30)).await
    }

    async fn publish_with(&self, payload: &[u8], headers: &[(&str, &str)]) {
        use lapin::types::{AMQPValue, FieldTable, LongString, ShortString};
        let mut table = FieldTable::default();
        for (name, value) in headers {
            table.insert(
                ShortString::from(*name),
                AMQPValue::LongString(LongString::from(*value)),
            );
        }
        self.channel
            .basic_publish(
                "".into(),
                self.queue.as_str().into(),
                lapin::options::BasicPublishOptions::default(),
                payload,
                lapin::BasicProperties::default()
                    .with_delivery_mode(2)
                    .with_headers(table),
            )
            .await
            .expect("publish")
            .await
            .expect("the queue confirmed it");
    }

    async fn missing(&self) -> String {
        guestlist_amqp::RabbitSource::builder(&self.url, "gl.no-such-queue")
            .connect()
            .await
            .unwrap_err()
            .to_string()
    }

    async fn source(&self) -> guestlist_amqp::RabbitSource {
        guestlist_amqp::RabbitSource::builder(&self.url, &self.queue)
            .prefetch(100)
            .dead_letter(&self.dead_letters, "")
            .connect()
            .await
            .expect("consume the queue")
    }

    async fn dead_letter_headers(&self) -> Vec<Vec<(String, String)>> {
        use lapin::options::BasicGetOptions;
        use lapin::types::AMQPValue;
        // Read on a channel of its own, then close it: unacknowledged, they go back.
        let connection =
            lapin::Connection::connect(&self.url, lapin::ConnectionProperties::default())
                .await
                .unwrap();
        let channel = connection.create_channel().await.unwrap();
        let mut all = Vec::new();
        while let Some(message) = channel
            .basic_get(
                self.dead_letters.as_str().into(),
                BasicGetOptions::default(),
            )
            .await
            .unwrap()
        {
            let headers = message
                .delivery
                .properties
                .headers()
                .as_ref()
                .map(|table| {
                    table
                        .inner()
                        .iter()
                        .map(|(name, value)| {
                            let value = match value {
                                AMQPValue::LongString(s) => {
                                    String::from_utf8_lossy(s.as_bytes()).into_owned()
                                }
                                other => format!("{other:?}"),
                            };
                            (name.as_str().to_owned(), value)
                        })
                        .collect()
                })
                .unwrap_or_default();
            all.push(headers);
        }
        let _ = connection.close(200, "read".into()).await;
        all
    }

    async fn outstanding(&self) -> u64 {
        self.count(&self.queue).await
    }

    async fn drained(&self) -> bool {
        // Unacknowledged deliveries are visible to rabbitmqctl only.
        let listed = tokio::process::Command::new("rabbitmqctl")
            .args([
                "list_queues",
                "-q",
                "--no-table-headers",
                "name",
                "messages",
            ])
            .output()
            .await
            .expect("rabbitmqctl");
        let listed = String::from_utf8_lossy(&listed.stdout);
        listed
            .lines()
            .filter_map(|line| line.split_once(char::is_whitespace))
            .find(|(name, _)| *name == self.queue)
            .is_some_and(|(_, messages)| messages.trim() == "0")
    }
}
