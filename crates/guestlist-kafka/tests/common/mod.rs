//! Kafka (tansu, started by the test script): a topic of four partitions per test, a
//! dead-letter topic, and a consumer group whose committed offsets say what is done.

#![allow(dead_code)] // each test binary uses the parts it needs
#![allow(unreachable_pub)] // a test crate has no public API

use std::time::Duration;

use rdkafka::ClientConfig;
use rdkafka::admin::{AdminClient, AdminOptions, NewTopic, TopicReplication};
use rdkafka::client::DefaultClientContext;
use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::message::{Headers, Message};
use rdkafka::producer::{FutureProducer, FutureRecord};
use rdkafka::{Offset, TopicPartitionList};

use guestlist_testkit::brokers::{Broker, Received};
use guestlist_testkit::fault_proxy::FaultProxy;
use guestlist_testkit::own_tansu::OwnTansu;

/// Partitions of each test topic: enough for two consumers to share.
const PARTITIONS: i32 = 4;

/// Kafka: a topic per test, a dead-letter topic, a consumer group per test.
pub struct Kafka {
    brokers: String,
    topic: String,
    dead_letters: String,
    group: String,
    producer: FutureProducer,
    /// The broker of the story's own this one is on, if any, stopped with it.
    own: Option<OwnTansu>,
}

impl Kafka {
    const URL_VAR: &'static str = "GUESTLIST_TEST_KAFKA_BROKERS";

    /// The test's topics and group; `test_pid` is the test process's id (the parent's, in a
    /// child process). A group is never reused across runs: tansu runs for the whole test run,
    /// and a group whose earlier members left (or were killed) can keep a new member waiting
    /// for its assignment.
    fn connect(tag: &str, test_pid: u32) -> Self {
        let brokers = std::env::var(Self::URL_VAR).unwrap_or_else(|_| "127.0.0.1:9092".to_owned());
        Self::connect_to(&brokers, tag, test_pid, Duration::from_secs(10))
    }

    /// [`Kafka::connect`] to `brokers`, the test's producer giving a record up after
    /// `message_timeout`.
    fn connect_to(brokers: &str, tag: &str, test_pid: u32, message_timeout: Duration) -> Self {
        let producer = ClientConfig::new()
            .set("bootstrap.servers", brokers)
            .set(
                "message.timeout.ms",
                message_timeout.as_millis().to_string(),
            )
            .create()
            .expect("a Kafka producer");
        Self {
            topic: format!("gl.{tag}"),
            dead_letters: format!("gl.{tag}.dead"),
            group: format!("gl-{tag}-{test_pid}"),
            brokers: brokers.to_owned(),
            producer,
            own: None,
        }
    }

    fn admin(&self) -> AdminClient<DefaultClientContext> {
        ClientConfig::new()
            .set("bootstrap.servers", &self.brokers)
            .create()
            .expect("a Kafka admin client")
    }

    /// A consumer outside any subscription, for reading offsets and topics.
    fn reader(&self) -> BaseConsumer {
        ClientConfig::new()
            .set("bootstrap.servers", &self.brokers)
            .set("group.id", &self.group)
            .set("enable.auto.commit", "false")
            .create()
            .expect("a Kafka consumer")
    }

    async fn create(&self) {
        let admin = self.admin();
        let options = AdminOptions::new().operation_timeout(Some(Duration::from_secs(10)));
        let _ = admin
            .delete_topics(&[&self.topic, &self.dead_letters], &options)
            .await;
        let topics = [
            NewTopic::new(&self.topic, PARTITIONS, TopicReplication::Fixed(1)),
            NewTopic::new(&self.dead_letters, 1, TopicReplication::Fixed(1)),
        ];
        let created = admin
            .create_topics(&topics, &options)
            .await
            .unwrap_or_else(|err| {
                panic!(
                    "Kafka at {}: {err}\nRun scripts/test.sh, which installs and starts every \
                     service the tests need (tansu for Kafka), or point {} at a running broker.",
                    self.brokers,
                    Self::URL_VAR
                )
            });
        for result in created {
            result.expect("create the test topic");
        }
    }

    /// (partition, high watermark, committed offset) of each partition of the topic.
    async fn offsets(&self) -> Vec<(i32, i64, i64)> {
        let (reader, topic) = (self.reader(), self.topic.clone());
        tokio::task::spawn_blocking(move || {
            let mut list = TopicPartitionList::new();
            for partition in 0..PARTITIONS {
                list.add_partition(&topic, partition);
            }
            let committed = reader
                .committed_offsets(list, Duration::from_secs(10))
                .expect("the group's committed offsets");
            (0..PARTITIONS)
                .map(|partition| {
                    let (_, high) = reader
                        .fetch_watermarks(&topic, partition, Duration::from_secs(10))
                        .expect("the partition's watermarks");
                    let done = match committed
                        .find_partition(&topic, partition)
                        .map(|element| element.offset())
                    {
                        Some(Offset::Offset(offset)) => offset,
                        _ => 0,
                    };
                    (partition, high, done)
                })
                .collect()
        })
        .await
        .unwrap()
    }

    /// Every record of `topic`, partition after partition, each in its partition's order.
    async fn all_records(
        &self,
        topic: &str,
        partitions: i32,
    ) -> Vec<rdkafka::message::OwnedMessage> {
        let (reader, topic) = (self.reader(), topic.to_owned());
        tokio::task::spawn_blocking(move || {
            let mut records = Vec::new();
            for partition in 0..partitions {
                let (_, high) = reader
                    .fetch_watermarks(&topic, partition, Duration::from_secs(10))
                    .unwrap();
                if high == 0 {
                    continue;
                }
                let mut list = TopicPartitionList::new();
                list.add_partition_offset(&topic, partition, Offset::Beginning)
                    .unwrap();
                reader.assign(&list).unwrap();
                // Read to the high watermark, then on until nothing comes for half a second:
                // tansu's watermark can fall short of what a partition holds (see drained).
                let deadline = std::time::Instant::now() + Duration::from_secs(30);
                let mut last = None;
                loop {
                    assert!(
                        std::time::Instant::now() < deadline,
                        "read {topic}/{partition}"
                    );
                    match reader.poll(Duration::from_millis(500)) {
                        Some(Ok(message)) => {
                            last = Some(message.offset());
                            records.push(message.detach());
                        }
                        Some(Err(err)) => panic!("read {topic}/{partition}: {err}"),
                        None if last.is_some_and(|offset| offset + 1 >= high) => break,
                        None => {}
                    }
                }
            }
            records
        })
        .await
        .unwrap()
    }
}

/// A header's value as text.
fn header(message: &rdkafka::message::OwnedMessage, name: &str) -> Option<String> {
    let headers = message.headers()?;
    headers
        .iter()
        .find(|h| h.key == name)
        .and_then(|h| h.value.map(|v| String::from_utf8_lossy(v).into_owned()))
}

impl Kafka {
    /// Publishes `payload` with the record key `key` and `headers`.
    pub async fn publish_keyed(&self, payload: &[u8], key: &str, headers: &[(&str, &str)]) {
        let mut owned = rdkafka::message::OwnedHeaders::new();
        for (name, value) in headers {
            owned = owned.insert(rdkafka::message::Header {
                key: name,
                value: Some(*value),
            });
        }
        self.producer
            .send(
                FutureRecord::to(&self.topic)
                    .payload(payload)
                    .key(key)
                    .headers(owned),
                Duration::from_secs(10),
            )
            .await
            .map_err(|(err, _)| err)
            .expect("the topic stored it");
    }
}

impl Kafka {
    /// Publishes `payloads` to `partition`, all at once, and waits until the topic stored them.
    pub async fn publish_to(&self, partition: i32, payloads: &[Vec<u8>]) {
        let mut sent = Vec::with_capacity(payloads.len());
        for payload in payloads {
            let record = FutureRecord::<str, [u8]>::to(&self.topic)
                .payload(payload)
                .partition(partition);
            sent.push(
                self.producer
                    .send_result(record)
                    .map_err(|(err, _)| err)
                    .expect("queued to send"),
            );
        }
        for delivery in sent {
            delivery
                .await
                .expect("delivered")
                .map_err(|(err, _)| err)
                .expect("the topic stored it");
        }
    }
}

impl Kafka {
    /// Produces `payload` with `headers`, under the record key `key` where given (which picks
    /// its partition), and waits for the topic to store it.
    async fn send(&self, payload: &[u8], headers: &[(&str, &str)], key: Option<&str>) {
        let mut owned = rdkafka::message::OwnedHeaders::new();
        for (name, value) in headers {
            owned = owned.insert(rdkafka::message::Header {
                key: name,
                value: Some(*value),
            });
        }
        let mut record = FutureRecord::<str, [u8]>::to(&self.topic)
            .payload(payload)
            .headers(owned);
        if let Some(key) = key {
            record = record.key(key);
        }
        self.producer
            .send(record, Duration::from_secs(10))
            .await
            .map_err(|(err, _)| err)
            .expect("the topic stored it");
    }
}

impl Broker for Kafka {
    type Source = guestlist_kafka::KafkaSource;
    type Publisher = guestlist_kafka::KafkaPublisher;
    const LABEL: &'static str = "Kafka";
    const DEDUPLICATES: bool = false;
    const REDELIVERS_IN_TIME: bool = false;
    const MISSING_TOPIC_ADVICE: &'static str = "at most 249";
    const NOWHERE_FOR_GOOD: bool = true;
    // Less than a third of the default: on tansu every kill costs the group a rebalance, and
    // 10,000 took 95 to 109 s a run, 5,000 50 to 61 s; 3,000 still outlast the six kills (the
    // story checks that three or more land while events flow).
    const CHAOS_EVENTS: usize = 3_000;

    fn topic(&self) -> String {
        self.topic.clone()
    }

    fn nowhere(&self, _tag: &str) -> String {
        // tansu creates any topic a client names; no Kafka broker takes a name over 249 bytes.
        format!("gl.nowhere.{}", "x".repeat(240))
    }

    fn program_args(&self) -> Vec<String> {
        vec!["--kafka".to_owned(), self.brokers.clone()]
    }

    async fn publisher(&self) -> guestlist_kafka::KafkaPublisher {
        self.publisher_at(&self.brokers)
            .await
            .expect("the relay's publisher")
    }

    async fn publisher_at(&self, url: &str) -> Option<guestlist_kafka::KafkaPublisher> {
        guestlist_kafka::KafkaPublisher::builder(url)
            .connect()
            .await
            .ok()
    }

    async fn open_behind_proxy(
        tag: &str,
        _ack_wait: Duration,
    ) -> Option<(Self, FaultProxy, String)> {
        let (own, proxy) = OwnTansu::behind_proxy().await;
        let through = proxy.addr().to_string();
        // The test's producer holds what it is given while the broker is away, and delivers
        // it once it is back.
        let mut kafka =
            Self::connect_to(&through, tag, std::process::id(), Duration::from_secs(120));
        kafka.own = Some(own);
        kafka.create().await;
        Some((kafka, proxy, through))
    }

    async fn committed(&self) -> Option<Vec<Vec<u8>>> {
        let offsets = self.offsets().await;
        let below = self
            .all_records(&self.topic, PARTITIONS)
            .await
            .into_iter()
            .filter(|record| {
                offsets.iter().any(|(partition, _, done)| {
                    *partition == record.partition() && record.offset() < *done
                })
            })
            .map(|record| record.payload().unwrap_or_default().to_vec())
            .collect();
        Some(below)
    }

    async fn stored(&self) -> Option<usize> {
        Some(self.received().await.len())
    }

    async fn received(&self) -> Vec<Received> {
        self.all_records(&self.topic, PARTITIONS)
            .await
            .iter()
            .map(|record| Received {
                id: header(record, guestlist_kafka::MESSAGE_ID_HEADER).unwrap_or_default(),
                key: header(record, "guestlist-ordering-key"),
                seq: header(record, "guestlist-seq").map_or(0, |seq| seq.parse().unwrap()),
            })
            .collect()
    }

    async fn open(tag: &str, _ack_wait: Duration) -> Self {
        let kafka = Self::connect(tag, std::process::id());
        kafka.create().await;
        kafka
    }

    async fn attach(tag: &str, _ack_wait: Duration) -> Self {
        // Only a test's child processes attach: the group is their parent's.
        Self::connect(tag, std::os::unix::process::parent_id())
    }

    async fn horizon_stream(tag: &str) -> Self {
        Self::open(tag, Duration::from_secs(30)).await
    }

    async fn publish_with(&self, payload: &[u8], headers: &[(&str, &str)]) {
        self.send(payload, headers, None).await;
    }

    async fn publish_keyed(&self, payload: &[u8], header: &str, key: &str) {
        self.send(payload, &[(header, key)], Some(key)).await;
    }

    async fn missing(&self) -> String {
        guestlist_kafka::KafkaSource::builder(&self.brokers, &self.group, "gl.no-such-topic")
            .dead_letter(&self.dead_letters)
            .connect()
            .await
            .unwrap_err()
            .to_string()
    }

    async fn source(&self) -> guestlist_kafka::KafkaSource {
        self.source_at(&self.brokers)
            .await
            .expect("join the consumer group")
    }

    async fn source_at(&self, url: &str) -> Option<guestlist_kafka::KafkaSource> {
        guestlist_kafka::KafkaSource::builder(url, &self.group, &self.topic)
            .dead_letter(&self.dead_letters)
            // A killed member's partitions move within seconds, not the default 45.
            .option("session.timeout.ms", "6000")
            .option("heartbeat.interval.ms", "500")
            .connect()
            .await
            .ok()
    }

    async fn dead_letter_headers(&self) -> Vec<Vec<(String, String)>> {
        self.all_records(&self.dead_letters, 1)
            .await
            .iter()
            .map(|record| {
                record.headers().map_or_else(Vec::new, |headers| {
                    headers
                        .iter()
                        .map(|h| {
                            let value = h.value.map(String::from_utf8_lossy).unwrap_or_default();
                            (h.key.to_owned(), value.into_owned())
                        })
                        .collect()
                })
            })
            .collect()
    }

    async fn outstanding(&self) -> u64 {
        self.offsets()
            .await
            .iter()
            .map(|(_, high, done)| (high - done).max(0) as u64)
            .sum()
    }

    async fn drained(&self) -> bool {
        // The group's committed offset is at the end of every partition. At or past: tansu's
        // high watermark can fall short of the records a partition holds after batches from
        // two idempotent producers (seen: 21 for 40 records), never above.
        self.offsets()
            .await
            .iter()
            .all(|(_, high, done)| done >= high)
    }
}
