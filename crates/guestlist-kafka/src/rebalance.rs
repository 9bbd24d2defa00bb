//! The consumer's side of a rebalance: a partition is given up only after the records in hand
//! from it are done, with their offsets committed.

use std::sync::Arc;
use std::time::Duration;

use rdkafka::consumer::{BaseConsumer, CommitMode, Consumer, ConsumerContext, Rebalance};
use rdkafka::{ClientContext, TopicPartitionList};

use crate::partitions::Partitions;

/// The callbacks librdkafka runs on the poll thread (and on the thread that closes the
/// consumer).
pub(crate) struct Rebalancing {
    pub(crate) partitions: Arc<Partitions>,
    pub(crate) topic: String,
    /// The longest a revocation waits for the records in hand.
    pub(crate) wait: Duration,
}

impl ClientContext for Rebalancing {}

impl ConsumerContext for Rebalancing {
    fn pre_rebalance(&self, consumer: &BaseConsumer<Self>, rebalance: &Rebalance<'_>) {
        match rebalance {
            Rebalance::Assign(list) => {
                let partitions = partitions_of(list, &self.topic);
                tracing::info!(topic = %self.topic, ?partitions, "partitions assigned");
                self.partitions.assigned(partitions);
            }
            Rebalance::Revoke(list) => {
                let partitions = partitions_of(list, &self.topic);
                tracing::info!(topic = %self.topic, ?partitions, "partitions revoked; finishing the records in hand");
                // Blocks this (the poll) thread, not the consumer's task: the batch in hand
                // commits meanwhile, and its offsets are committed below.
                let offsets = self.partitions.revoked(&partitions, self.wait);
                if let Err(err) = commit(consumer, &self.topic, &offsets, CommitMode::Sync) {
                    tracing::warn!(error = %err, "cannot commit the revoked partitions' offsets; the next owner reads their last records again");
                }
            }
            Rebalance::Error(err) => tracing::warn!(error = %err, "rebalance failed"),
        }
    }
}

fn partitions_of(list: &TopicPartitionList, topic: &str) -> Vec<i32> {
    list.elements_for_topic(topic)
        .iter()
        .map(|element| element.partition())
        .collect()
}

/// Commits `offsets` (partition, next offset to read) of `topic`.
pub(crate) fn commit<C: ConsumerContext>(
    consumer: &BaseConsumer<C>,
    topic: &str,
    offsets: &[(i32, i64)],
    mode: CommitMode,
) -> rdkafka::error::KafkaResult<()> {
    if offsets.is_empty() {
        return Ok(());
    }
    let mut list = TopicPartitionList::with_capacity(offsets.len());
    for (partition, offset) in offsets {
        list.add_partition_offset(topic, *partition, rdkafka::Offset::Offset(*offset))?;
    }
    consumer.commit(&list, mode)
}
