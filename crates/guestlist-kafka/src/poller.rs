//! The poll thread: librdkafka's consumer is driven by `poll`, which also runs the rebalance
//! callbacks. Polling on a thread of its own lets a revocation wait for the batch the consumer's
//! task has in hand, and keeps the group membership alive while a batch commits.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use rdkafka::consumer::Consumer;
use rdkafka::error::KafkaResult;
use rdkafka::message::{Message, OwnedMessage};
use rdkafka::{Offset, TopicPartitionList};
use tokio::sync::mpsc;

use crate::partitions::Rewind;
use crate::shared::Shared;
use crate::turns::Turns;

/// The longest a poll waits: how soon a rewind or a resume is carried out.
const POLL: Duration = Duration::from_millis(20);
/// The longest the main queue is waited on while the partitions have queues of their own: how
/// soon a record is taken from them when they were empty.
const IDLE: Duration = Duration::from_millis(5);

/// How often the partitions' state is logged (at debug level).
const SUMMARY: Duration = Duration::from_secs(10);

/// A record as polled, with the epoch of its partition at that moment.
pub(crate) struct Polled {
    pub(crate) message: OwnedMessage,
    pub(crate) epoch: u64,
}

/// Polls until `stop` is set or the source is gone, feeding `records`.
pub(crate) fn run(shared: Arc<Shared>, records: mpsc::Sender<Polled>, stop: Arc<AtomicBool>) {
    let mut paused: Vec<Rewind> = Vec::new();
    let mut turns = Turns::default();
    let mut summed_up = Instant::now();
    while !stop.load(Ordering::Relaxed) {
        if summed_up.elapsed() >= SUMMARY && tracing::enabled!(tracing::Level::DEBUG) {
            summed_up = Instant::now();
            tracing::debug!(partitions = %shared.partitions.summary(), parked = shared.parked.len(),
                paused = paused.len(), "where the partitions stand");
        }
        for rewind in shared.partitions.take_rewinds() {
            seek_back(&shared, &rewind);
            paused.retain(|p| p.partition != rewind.partition);
            paused.push(rewind);
        }
        let now = Instant::now();
        paused.retain(|rewind| {
            if rewind.resume_at > now {
                return true;
            }
            if let Err(err) = shared.consumer.resume(&one(&shared.topic, rewind.partition)) {
                tracing::warn!(partition = rewind.partition, error = %err, "cannot resume a partition");
            }
            false
        });
        if turns.follow(&shared) {
            // What was fetched before the split came first: out of the main queue it goes.
            while let Some(polled) = shared.consumer.poll(Duration::ZERO) {
                if !forward(&shared, &records, polled.map(|m| m.detach())) {
                    return;
                }
            }
        }
        // The main queue serves the callbacks (rebalances) and errors; the records come from
        // the partitions' own queues, in turns.
        let wait = if turns.is_empty() { POLL } else { IDLE };
        let main = shared
            .consumer
            .poll(wait)
            .map(|polled| polled.map(|m| m.detach()));
        for polled in main.into_iter().chain(turns.take()) {
            if !forward(&shared, &records, polled) {
                return;
            }
        }
    }
}

/// Hands a polled record to the source (or logs a failed poll); `false` once the source is
/// gone.
fn forward(
    shared: &Shared,
    records: &mpsc::Sender<Polled>,
    polled: KafkaResult<OwnedMessage>,
) -> bool {
    let message = match polled {
        Ok(message) => message,
        Err(err) => {
            tracing::warn!(error = %err, "Kafka poll failed; polling again");
            std::thread::sleep(Duration::from_millis(100));
            return true;
        }
    };
    let Some(epoch) = shared.partitions.epoch_for_poll(message.partition()) else {
        return true; // stale: its partition was revoked, or is being sought back
    };
    records.blocking_send(Polled { message, epoch }).is_ok()
}

/// Pauses the partition and seeks it back to the record handed back; it resumes after the
/// delay. librdkafka drops what it had fetched past the old position.
fn seek_back(shared: &Shared, rewind: &Rewind) {
    let partition = one(&shared.topic, rewind.partition);
    if let Err(err) = shared.consumer.pause(&partition) {
        tracing::warn!(partition = rewind.partition, error = %err, "cannot pause a partition");
    }
    let sought = shared.consumer.seek(
        &shared.topic,
        rewind.partition,
        Offset::Offset(rewind.offset),
        Duration::from_secs(10),
    );
    if let Err(err) = sought {
        tracing::warn!(partition = rewind.partition, offset = rewind.offset, error = %err,
            "cannot seek a partition back; its records are read again after a restart or rebalance");
    }
    shared.partitions.rewound(rewind.partition);
}

fn one(topic: &str, partition: i32) -> TopicPartitionList {
    let mut list = TopicPartitionList::with_capacity(1);
    list.add_partition(topic, partition);
    list
}
