//! What a source, its poll thread and its deliveries share.

use std::sync::Arc;
use std::sync::atomic::AtomicBool;

use crate::parked::Parked;
use crate::partitions::Partitions;
use crate::rebalance::Rebalancing;
use crate::renewing::Renewing;
use rdkafka::consumer::BaseConsumer;

/// What the source, its poll thread and its deliveries share.
pub(crate) struct Shared {
    /// In an `Arc` so that the poll thread can read each partition from a queue of its own.
    pub(crate) consumer: Arc<BaseConsumer<Rebalancing>>,
    pub(crate) partitions: Arc<Partitions>,
    pub(crate) topic: String,
    pub(crate) dead_letters: Renewing,
    pub(crate) dead_letter_topic: String,
    /// Whether the broker id is the record's key rather than its `message-id` header.
    pub(crate) id_in_key: bool,
    /// Whether the consumer orders by key itself: a record handed back is parked, not sought
    /// back to.
    pub(crate) by_key: AtomicBool,
    /// The records parked.
    pub(crate) parked: Parked,
}
