//! The assigned partitions read in turns, each from a queue of its own: librdkafka hands out
//! what it fetched in the order it fetched it, so a partition with a long backlog would keep
//! every other partition's records behind the whole backlog (minutes, at a handler's
//! milliseconds a record, whatever the fetch limits: brokers need not honour them).

use std::sync::Arc;
use std::time::Duration;

use rdkafka::consumer::BaseConsumer;
use rdkafka::consumer::base_consumer::PartitionQueue;
use rdkafka::error::KafkaResult;
use rdkafka::message::OwnedMessage;

use crate::rebalance::Rebalancing;
use crate::shared::Shared;

/// How many records a partition gives at its turn.
const TURN: usize = 16;

/// The partition queues of the current assignment.
#[derive(Default)]
pub(crate) struct Turns {
    /// The assignment they were split for (an assignment undoes them).
    assignment: u64,
    queues: Vec<PartitionQueue<Rebalancing>>,
}

impl Turns {
    /// Splits each partition of a new assignment into a queue of its own; `true` when it did
    /// (what the main queue still holds of them came first: read it out before their queues).
    pub(crate) fn follow(&mut self, shared: &Shared) -> bool {
        let (assignment, partitions) = shared.partitions.assignment();
        if assignment == self.assignment {
            return false;
        }
        self.assignment = assignment;
        self.queues = partitions
            .into_iter()
            .filter_map(|partition| split(&shared.consumer, &shared.topic, partition))
            .collect();
        true
    }

    /// Whether no partition has a queue of its own.
    pub(crate) fn is_empty(&self) -> bool {
        self.queues.is_empty()
    }

    /// Up to [`TURN`] records of each partition, the partitions in turn, as they stand.
    pub(crate) fn take(&self) -> Vec<KafkaResult<OwnedMessage>> {
        let mut taken = Vec::new();
        for queue in &self.queues {
            for _ in 0..TURN {
                match queue.poll(Duration::ZERO) {
                    Some(polled) => taken.push(polled.map(|m| m.detach())),
                    None => break,
                }
            }
        }
        taken
    }
}

fn split(
    consumer: &Arc<BaseConsumer<Rebalancing>>,
    topic: &str,
    partition: i32,
) -> Option<PartitionQueue<Rebalancing>> {
    let queue = consumer.split_partition_queue(topic, partition);
    if queue.is_none() {
        tracing::warn!(
            partition,
            "cannot read a partition from a queue of its own; its records come in fetch order"
        );
    }
    queue
}
