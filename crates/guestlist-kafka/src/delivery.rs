//! One Kafka record in the consumer's hands.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use guestlist_consumer::{BoxError, Delivery};
use rdkafka::consumer::CommitMode;
use rdkafka::message::{Header, Headers, Message, OwnedHeaders, OwnedMessage};
use rdkafka::producer::FutureRecord;

use crate::MESSAGE_ID_HEADER;
use crate::partitions::Ticket;
use crate::rebalance::commit;
use crate::shared::Shared;

/// One record of a [`KafkaSource`](crate::KafkaSource). A handler reaches it with
/// [`Message::delivery`](guestlist_consumer::Message::delivery), for its
/// [`partition`](Self::partition), [`offset`](Self::offset) and the record itself
/// ([`record`](Self::record): timestamp, raw key and headers).
///
/// Acknowledging it marks it done; the partition's offset is committed past it once every
/// record before it is done too. A record dropped without being settled (acknowledged, handed
/// back or dead-lettered) is read again.
pub struct KafkaDelivery {
    message: OwnedMessage,
    ticket: Ticket,
    failures: u32,
    shared: Arc<Shared>,
    settled: AtomicBool,
}

impl std::fmt::Debug for KafkaDelivery {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("KafkaDelivery")
            .field("topic", &self.message.topic())
            .field("partition", &self.message.partition())
            .field("offset", &self.message.offset())
            .finish_non_exhaustive()
    }
}

impl KafkaDelivery {
    pub(crate) fn new(
        message: OwnedMessage,
        ticket: Ticket,
        failures: u32,
        shared: Arc<Shared>,
    ) -> Self {
        Self {
            message,
            ticket,
            failures,
            shared,
            settled: AtomicBool::new(false),
        }
    }

    /// The record's partition.
    pub fn partition(&self) -> i32 {
        self.message.partition()
    }

    /// The record's offset in its partition.
    pub fn offset(&self) -> i64 {
        self.message.offset()
    }

    /// The record as polled: topic, key and headers as bytes, timestamp.
    pub fn record(&self) -> &OwnedMessage {
        &self.message
    }

    /// Marks the record done, without committing yet.
    fn settle(&self) {
        if !self.settled.swap(true, Ordering::AcqRel) {
            self.shared
                .partitions
                .settle(self.partition(), self.offset(), self.ticket);
        }
    }

    /// Commits the offsets that moved (without waiting for the broker's answer: a lost commit
    /// replays records the inbox knows as duplicates).
    fn commit(shared: &Shared) -> Result<(), BoxError> {
        let offsets = shared.partitions.to_commit();
        commit(&shared.consumer, &shared.topic, &offsets, CommitMode::Async)?;
        Ok(())
    }
}

impl Delivery for KafkaDelivery {
    fn payload(&self) -> &[u8] {
        self.message.payload().unwrap_or_default()
    }

    fn header(&self, name: &str) -> Option<&str> {
        let headers = self.message.headers()?;
        headers
            .iter()
            .find(|header| header.key == name)
            .and_then(|header| std::str::from_utf8(header.value?).ok())
    }

    fn headers(&self) -> Vec<(String, String)> {
        let Some(headers) = self.message.headers() else {
            return Vec::new();
        };
        headers
            .iter()
            .map(|header| {
                let value = header
                    .value
                    .map(String::from_utf8_lossy)
                    .unwrap_or_default();
                (header.key.to_owned(), value.into_owned())
            })
            .collect()
    }

    fn key(&self) -> Option<String> {
        self.message
            .key()
            .map(|key| String::from_utf8_lossy(key).into_owned())
    }

    fn topic(&self) -> Option<String> {
        Some(self.message.topic().to_owned())
    }

    fn broker_id(&self) -> Option<&str> {
        if self.shared.id_in_key {
            std::str::from_utf8(self.message.key()?).ok()
        } else {
            self.header(MESSAGE_ID_HEADER)
        }
    }

    fn delivery_count(&self) -> u32 {
        self.failures.saturating_add(1)
    }

    fn withdrawn(&self) -> bool {
        self.shared
            .partitions
            .withdrawn(self.partition(), self.offset(), self.ticket)
    }

    async fn ack(&self) -> Result<(), BoxError> {
        self.settle();
        Self::commit(&self.shared)
    }

    async fn ack_all(deliveries: &[&Self]) -> Result<(), BoxError> {
        let Some(first) = deliveries.first() else {
            return Ok(());
        };
        for delivery in deliveries {
            delivery.settle();
        }
        Self::commit(&first.shared)
    }

    async fn nak(&self, delay: Duration) -> Result<(), BoxError> {
        if self.settled.swap(true, Ordering::AcqRel) {
            return Ok(());
        }
        let shared = &self.shared;
        if shared.by_key.load(Ordering::Relaxed)
            && shared.parked.park(self.message.clone(), self.ticket, delay)
        {
            // False where it was withdrawn meanwhile: it is read again from the broker, and the
            // parked copy is dropped when due.
            shared
                .partitions
                .park(self.partition(), self.offset(), self.ticket);
            return Ok(());
        }
        shared
            .partitions
            .rewind(self.partition(), self.offset(), self.ticket, delay, true);
        Ok(())
    }

    async fn dead_letter(&self, reason: &str) -> Result<(), BoxError> {
        let mut headers = OwnedHeaders::new();
        if let Some(original) = self.message.headers() {
            for header in original.iter() {
                headers = headers.insert(header);
            }
        }
        let (partition, offset) = (self.partition().to_string(), self.offset().to_string());
        for (key, value) in [
            ("guestlist-error", reason),
            ("guestlist-topic", self.message.topic()),
            ("guestlist-partition", partition.as_str()),
            ("guestlist-offset", offset.as_str()),
        ] {
            headers = headers.insert(Header {
                key,
                value: Some(value),
            });
        }
        let mut record = FutureRecord::<[u8], [u8]>::to(&self.shared.dead_letter_topic)
            .payload(self.payload())
            .headers(headers);
        if let Some(key) = self.message.key() {
            record = record.key(key);
        }
        // Stored in the dead-letter topic first (acks from all in-sync replicas), then done here.
        let producer = self.shared.dead_letters.current();
        let stored = producer.send(record, Duration::from_secs(30)).await;
        if let Err((err, _)) = &stored {
            self.shared.dead_letters.renew_if_stopped(producer, [err]);
        }
        stored.map_err(|(err, _)| err)?;
        self.settle();
        Self::commit(&self.shared)
    }

    async fn keep_alive(&self) -> Result<(), BoxError> {
        Ok(()) // the poll thread keeps the membership alive; records have no deadline
    }
}

impl Drop for KafkaDelivery {
    fn drop(&mut self) {
        if self.settled.load(Ordering::Acquire) {
            return;
        }
        // Neither done nor handed back: read it again, at once, uncounted (nothing to do where
        // it was withdrawn already: it is read again anyway).
        self.shared.partitions.rewind(
            self.partition(),
            self.offset(),
            self.ticket,
            Duration::ZERO,
            false,
        );
    }
}
