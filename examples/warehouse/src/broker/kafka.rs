//! Kafka: the topic `ORDERS` (four partitions, each order's events on one by their key), its
//! dead letters in `ORDERS.dead`, the warehouse's own events in `ORDERS.picks`; the warehouses
//! share `ORDERS` as the consumer group `warehouse`.

use std::time::Duration;

use anyhow::Context as _;
use rdkafka::ClientConfig;
use rdkafka::admin::{AdminClient, AdminOptions, NewTopic, TopicReplication};
use rdkafka::client::DefaultClientContext;
use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::message::{Header, Message as _, OwnedHeaders};
use rdkafka::producer::{FutureProducer, FutureRecord};
use rdkafka::types::RDKafkaErrorCode;
use rdkafka::{Offset, TopicPartitionList};

use super::Orders;
use crate::warehouse::OrderPaid;

/// Partitions of `ORDERS`: enough for both warehouses to have some.
const PARTITIONS: i32 = 4;
/// The consumer group the warehouses share.
const GROUP: &str = "warehouse";
/// How long a question to the brokers may take.
const WAIT: Duration = Duration::from_secs(10);

/// Creates the three topics where missing.
pub(super) async fn declare(orders: &Orders) -> anyhow::Result<()> {
    let (dead, picks) = (orders.dead_letters(), orders.picks());
    let topics = [
        NewTopic::new(&orders.name, PARTITIONS, TopicReplication::Fixed(1)),
        NewTopic::new(&dead, 1, TopicReplication::Fixed(1)),
        NewTopic::new(&picks, PARTITIONS, TopicReplication::Fixed(1)),
    ];
    let created = admin(orders)?
        .create_topics(&topics, &AdminOptions::new())
        .await
        .with_context(|| format!("creating topics on Kafka at {}", orders.kafka_brokers()))?;
    for result in created {
        match result {
            Ok(_) | Err((_, RDKafkaErrorCode::TopicAlreadyExists)) => {}
            Err((topic, err)) => anyhow::bail!("creating Kafka topic {topic}: {err}"),
        }
    }
    Ok(())
}

/// Deletes the three topics, where present.
pub(super) async fn remove(orders: &Orders) -> anyhow::Result<()> {
    let (dead, picks) = (orders.dead_letters(), orders.picks());
    // Deleting a topic that is not there fails; that is what we want anyway.
    let _ = admin(orders)?
        .delete_topics(&[&orders.name, &dead, &picks], &AdminOptions::new())
        .await;
    Ok(())
}

/// Publishes `payload` keyed by its order, its id in the `message-id` header, and waits for
/// the broker to store it.
pub(super) async fn publish(
    orders: &Orders,
    event: &OrderPaid,
    payload: &[u8],
) -> anyhow::Result<()> {
    let producer: FutureProducer = ClientConfig::new()
        .set("bootstrap.servers", orders.kafka_brokers())
        .create()?;
    let key = event.order.to_string();
    let mut record = FutureRecord::to(&orders.name).key(&key).payload(payload);
    if let Some(id) = &event.id {
        record = record.headers(OwnedHeaders::new().insert(Header {
            key: guestlist::kafka::MESSAGE_ID_HEADER,
            value: Some(id.as_str()),
        }));
    }
    producer
        .send(record, WAIT)
        .await
        .map_err(|(err, _)| err)
        .context("Kafka did not store the event")?;
    Ok(())
}

/// Records of `ORDERS` past the group's committed offsets, and dead letters.
pub(super) async fn left_over(orders: &Orders) -> anyhow::Result<Vec<String>> {
    let reader: BaseConsumer = ClientConfig::new()
        .set("bootstrap.servers", orders.kafka_brokers())
        .set("group.id", GROUP)
        .set("enable.auto.commit", "false")
        .create()?;
    let (topic, dead) = (orders.name.clone(), orders.dead_letters());
    tokio::task::spawn_blocking(move || {
        let mut list = TopicPartitionList::new();
        for partition in 0..PARTITIONS {
            list.add_partition(&topic, partition);
        }
        let committed = reader.committed_offsets(list, WAIT)?;
        let mut behind = 0;
        for partition in 0..PARTITIONS {
            let (_, high) = reader.fetch_watermarks(&topic, partition, WAIT)?;
            let done = match committed
                .find_partition(&topic, partition)
                .map(|element| element.offset())
            {
                Some(Offset::Offset(offset)) => offset,
                _ => 0,
            };
            // At or past the end: a broker's high watermark can fall short of what a
            // partition holds for a moment after batches from two idempotent producers.
            behind += (high - done).max(0);
        }
        let mut left = Vec::new();
        if behind > 0 {
            left.push(format!(
                "{behind} records past the group's committed offsets"
            ));
        }
        let (low, high) = reader.fetch_watermarks(&dead, 0, WAIT)?;
        if high > low {
            left.push(format!("{} dead letters", high - low));
        }
        Ok(left)
    })
    .await?
}

/// The payload of every record in `ORDERS.picks`, partition by partition, read from the
/// beginning by a reader of no group.
pub(super) async fn picks(orders: &Orders) -> anyhow::Result<Vec<Vec<u8>>> {
    let reader: BaseConsumer = ClientConfig::new()
        .set("bootstrap.servers", orders.kafka_brokers())
        .set("group.id", "warehouse-example-reader")
        .set("enable.auto.commit", "false")
        .create()?;
    let topic = orders.picks();
    tokio::task::spawn_blocking(move || {
        let mut picks = Vec::new();
        for partition in 0..PARTITIONS {
            let (low, high) = reader.fetch_watermarks(&topic, partition, WAIT)?;
            if high <= low {
                continue;
            }
            let mut list = TopicPartitionList::new();
            list.add_partition_offset(&topic, partition, Offset::Offset(low))?;
            reader.assign(&list)?;
            let mut next = low;
            while next < high {
                let record = reader
                    .poll(WAIT)
                    .context("no record from Kafka within 10 s")??;
                next = record.offset() + 1;
                picks.push(record.payload().unwrap_or_default().to_vec());
            }
        }
        Ok(picks)
    })
    .await?
}

/// A member of the group `warehouse`, dead-lettering to `ORDERS.dead`. A member that died
/// keeps its partitions until its session times out: 10 s here rather than librdkafka's 45, so
/// that the other warehouse takes them over soon.
pub(super) async fn source(orders: &Orders) -> anyhow::Result<guestlist::kafka::KafkaSource> {
    Ok(
        guestlist::kafka::KafkaSource::builder(orders.kafka_brokers(), GROUP, &orders.name)
            .dead_letter(&orders.dead_letters())
            .option("session.timeout.ms", "10000")
            .option("heartbeat.interval.ms", "3000")
            .connect()
            .await?,
    )
}

fn admin(orders: &Orders) -> anyhow::Result<AdminClient<DefaultClientContext>> {
    Ok(ClientConfig::new()
        .set("bootstrap.servers", orders.kafka_brokers())
        .create()?)
}
