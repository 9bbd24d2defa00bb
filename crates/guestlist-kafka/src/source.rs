//! The source: a consumer-group member of one topic, fed by the poll thread.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use guestlist_consumer::{BoxError, Source};
use rdkafka::ClientConfig;
use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::message::Message;
use tokio::sync::mpsc;

use crate::Error;
use crate::delivery::KafkaDelivery;
use crate::parked::Parked;
use crate::partitions::Partitions;
use crate::poller::{self, Polled};
use crate::rebalance::Rebalancing;
use crate::shared::Shared;

/// Records of one Kafka topic, as a member of a consumer group.
///
/// Several consumers with one group id share the topic's partitions; each partition's records
/// come in order. Offsets are committed only for records whose batch committed (or that went to
/// the dead-letter topic), and only past an unbroken run of them: a crash or a rebalance
/// replays from the first record not known to be done, and the inbox answers the replays as
/// duplicates. A revoked partition is given up once the records in hand from it are done (up
/// to [`KafkaSourceBuilder::rebalance_wait`]) and their offsets committed; those behind a
/// record handed back or waiting out a delay are let go as they come up to run (a batch run
/// side by side already begun finishes, unacknowledged), for the next owner to run after it.
///
/// A failed record is handed back by seeking its partition to it after the backoff: the
/// records after it wait, so per-partition order holds through failures. Kafka counts no
/// deliveries; this source counts a record's failures while it owns the partition (a new owner
/// starts again from zero).
pub struct KafkaSource {
    shared: Option<Arc<Shared>>,
    records: mpsc::Receiver<Polled>,
    stop: Arc<AtomicBool>,
    poller: Option<JoinHandle<()>>,
    fetch_wait: Duration,
}

impl std::fmt::Debug for KafkaSource {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let topic = self.shared.as_ref().map(|s| s.topic.as_str());
        f.debug_struct("KafkaSource")
            .field("topic", &topic)
            .finish_non_exhaustive()
    }
}

/// Settings for a [`KafkaSource`]; [`connect`](Self::connect) starts it.
#[derive(Debug, Clone)]
#[must_use]
pub struct KafkaSourceBuilder {
    brokers: String,
    group: String,
    topic: String,
    dead_letter_topic: Option<String>,
    rebalance_wait: Duration,
    id_in_key: bool,
    options: Vec<(String, String)>,
}

impl KafkaSource {
    /// Settings for a member of consumer group `group` reading `topic` from the brokers
    /// `brokers` (`host:port`, comma-separated).
    ///
    /// ```no_run
    /// # async fn run() -> Result<(), guestlist_kafka::Error> {
    /// let source = guestlist_kafka::KafkaSource::builder("127.0.0.1:9092", "warehouse", "orders")
    ///     .dead_letter("orders.dead-letters")
    ///     .option("session.timeout.ms", "10000")
    ///     .connect()
    ///     .await?;
    /// # let _ = source; Ok(()) }
    /// ```
    pub fn builder(brokers: &str, group: &str, topic: &str) -> KafkaSourceBuilder {
        KafkaSourceBuilder {
            brokers: brokers.to_owned(),
            group: group.to_owned(),
            topic: topic.to_owned(),
            dead_letter_topic: None,
            rebalance_wait: Duration::from_secs(30),
            id_in_key: false,
            options: Vec::new(),
        }
    }

    /// The partitions the group has assigned to this consumer so far (none until it has
    /// joined: joining takes a few seconds, longer while a departed member's session runs out).
    pub fn assignment(&self) -> Vec<i32> {
        self.shared
            .as_ref()
            .map_or_else(Vec::new, |shared| shared.partitions.assigned_now())
    }

    /// Waits up to `limit` until the group has assigned this consumer a partition; `false` if
    /// it has not by then (another member may hold them all).
    pub async fn joined(&self, limit: Duration) -> bool {
        let deadline = tokio::time::Instant::now() + limit;
        while self.assignment().is_empty() {
            if tokio::time::Instant::now() >= deadline {
                return false;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        true
    }

    /// Up to `max` parked records whose delay is over, handed out again (those withdrawn
    /// meanwhile are dropped: they are read again from the broker).
    fn parked_due(&self, max: usize) -> Vec<KafkaDelivery> {
        let Some(shared) = &self.shared else {
            return Vec::new();
        };
        shared
            .parked
            .due(max)
            .into_iter()
            .filter_map(|(message, parked)| {
                let (partition, offset) = (message.partition(), message.offset());
                let (failures, ticket) = shared.partitions.unpark(partition, offset, parked)?;
                Some(KafkaDelivery::new(
                    message,
                    ticket,
                    failures,
                    Arc::clone(shared),
                ))
            })
            .collect()
    }

    fn delivery(&self, polled: Polled) -> Option<KafkaDelivery> {
        let shared = self.shared.as_ref()?;
        let (partition, offset) = (polled.message.partition(), polled.message.offset());
        let (failures, ticket) = shared
            .partitions
            .hand_out(partition, offset, polled.epoch)?;
        Some(KafkaDelivery::new(
            polled.message,
            ticket,
            failures,
            Arc::clone(shared),
        ))
    }
}

impl KafkaSourceBuilder {
    /// The topic a poison record goes to, with its error in a `guestlist-error` header
    /// (required: Kafka has no dead-letter place of its own). It must exist.
    pub fn dead_letter(mut self, topic: &str) -> Self {
        self.dead_letter_topic = Some(topic.to_owned());
        self
    }

    /// The longest a revoked partition waits for the records in hand from it to be done
    /// (default 30 s). Past it the partition goes anyway; its next owner reads the unfinished
    /// records again and the inbox keeps them from running twice.
    pub fn rebalance_wait(mut self, wait: Duration) -> Self {
        self.rebalance_wait = wait;
        self
    }

    /// Makes [`IdFrom::BrokerId`](guestlist_consumer::IdFrom::BrokerId) read the record's key
    /// instead of its `message-id` header: for topics whose key is the event's own id.
    pub fn broker_id_from_key(mut self) -> Self {
        self.id_in_key = true;
        self
    }

    /// Sets a librdkafka consumer property (`session.timeout.ms`, `security.protocol`, …).
    /// The ones this source relies on (`enable.auto.commit`, `group.id`) cannot be overridden.
    pub fn option(mut self, key: &str, value: &str) -> Self {
        self.options.push((key.to_owned(), value.to_owned()));
        self
    }

    /// Checks that both topics exist, joins the group and starts polling.
    pub async fn connect(self) -> Result<KafkaSource, Error> {
        let dead_letter_topic = self
            .dead_letter_topic
            .clone()
            .ok_or(Error::NoDeadLetterTopic)?;
        let partitions = Arc::new(Partitions::default());
        let mut config = ClientConfig::new();
        config
            .set("bootstrap.servers", &self.brokers)
            .set("auto.offset.reset", "earliest")
            // A record handed back is fetched again soon after its delay, not after the
            // broker's long poll for new records (500 ms by default) ends.
            .set("fetch.wait.max.ms", "100")
            // A handler takes milliseconds a record: a thousand records of a partition
            // prefetched keep it busy (librdkafka's default, 100,000, holds memory for nothing).
            .set("queued.min.messages", "1000");
        for (key, value) in &self.options {
            config.set(key, value);
        }
        config
            .set("group.id", &self.group)
            .set("enable.auto.commit", "false")
            .set("enable.auto.offset.store", "false");
        let context = Rebalancing {
            partitions: Arc::clone(&partitions),
            topic: self.topic.clone(),
            wait: self.rebalance_wait,
        };
        let consumer: BaseConsumer<Rebalancing> = config.create_with_context(context)?;
        let dead_letters =
            crate::renewing::Renewing::new(crate::producer_config(&self.brokers, &self.options))?;
        let topics = [self.topic.clone(), dead_letter_topic.clone()];
        let (consumer, topics) = tokio::task::spawn_blocking(move || {
            let found = crate::check_topics(&consumer, &topics);
            (consumer, found)
        })
        .await
        .unwrap_or_else(|err| std::panic::resume_unwind(err.into_panic()));
        topics?;
        consumer.subscribe(&[&self.topic])?;
        let shared = Arc::new(Shared {
            consumer: Arc::new(consumer),
            partitions,
            topic: self.topic,
            dead_letters,
            dead_letter_topic,
            id_in_key: self.id_in_key,
            by_key: AtomicBool::new(false),
            parked: Parked::default(),
        });
        let (sender, records) = mpsc::channel(CHANNEL);
        let stop = Arc::new(AtomicBool::new(false));
        let poller = {
            let (shared, stop) = (Arc::clone(&shared), Arc::clone(&stop));
            std::thread::Builder::new()
                .name("guestlist-kafka-poll".to_owned())
                .spawn(move || poller::run(shared, sender, stop))
                .map_err(Error::Thread)?
        };
        Ok(KafkaSource {
            shared: Some(shared),
            records,
            stop,
            poller: Some(poller),
            fetch_wait: Duration::from_millis(250),
        })
    }
}

impl Source for KafkaSource {
    type Delivery = KafkaDelivery;

    async fn fetch(&mut self, max: usize) -> Result<Vec<KafkaDelivery>, BoxError> {
        let parked = self.parked_due(max);
        if !parked.is_empty() {
            return Ok(parked);
        }
        // The first record may wait (no longer than the next parked one); the rest of a batch is
        // whatever has already been polled.
        let wait = self
            .shared
            .as_ref()
            .and_then(|shared| shared.parked.next_due())
            .map_or(self.fetch_wait, |due| {
                due.saturating_duration_since(Instant::now())
                    .min(self.fetch_wait)
            });
        let first = match tokio::time::timeout(wait, self.records.recv()).await {
            Ok(Some(first)) => first,
            Ok(None) => return Err(POLL_STOPPED.into()),
            Err(_) => return Ok(Vec::new()),
        };
        let mut deliveries = Vec::with_capacity(max);
        deliveries.extend(self.delivery(first));
        deliveries.extend(
            self.fetch_ready(max.saturating_sub(deliveries.len()))
                .await?,
        );
        Ok(deliveries)
    }

    async fn fetch_ready(&mut self, max: usize) -> Result<Vec<KafkaDelivery>, BoxError> {
        let mut deliveries = self.parked_due(max);
        while deliveries.len() < max {
            match self.records.try_recv() {
                Ok(polled) => deliveries.extend(self.delivery(polled)),
                Err(mpsc::error::TryRecvError::Empty) => break,
                Err(mpsc::error::TryRecvError::Disconnected) => return Err(POLL_STOPPED.into()),
            }
        }
        Ok(deliveries)
    }

    fn order_by_key(&mut self) {
        if let Some(shared) = &self.shared {
            shared.by_key.store(true, Ordering::Relaxed);
        }
    }

    fn ack_wait(&self) -> Option<Duration> {
        None // the poll thread keeps the membership alive however long a batch takes
    }

    fn redelivery_horizon(&self) -> Option<Duration> {
        None // a record can be read again for as long as the topic keeps it
    }
}

/// The records polled and not yet fetched, at most: what a record of another partition may wait
/// behind, besides librdkafka's own queue.
const CHANNEL: usize = 256;

/// The error of a fetch after the poll thread ended.
const POLL_STOPPED: &str = "the Kafka poll thread stopped";

impl Drop for KafkaSource {
    /// Stops polling, then leaves the group: the partitions are revoked with their offsets
    /// committed (this blocks until the group has been left).
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        self.records.close();
        if let Some(poller) = self.poller.take() {
            let _ = poller.join();
        }
        drop(self.shared.take());
    }
}
