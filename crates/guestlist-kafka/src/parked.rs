//! Records handed back while the consumer orders by key itself (its concurrency above one):
//! kept in memory and handed out again once their delay is over, while their partition goes on.
//! A seek back would take every later record of the partition back with them, every key's;
//! parked, a record holds back only its own key (the consumer keeps that key's later records
//! waiting behind it), and the partition's committed offset stays below it until it is done.

use std::sync::Mutex;
use std::time::{Duration, Instant};

use rdkafka::message::{Message, OwnedMessage};

use crate::partitions::Ticket;

/// The most records parked at once: past it a record handed back seeks its partition back, as
/// when the consumer does not order by key, so that memory stays bounded whatever fails.
pub(crate) const MOST: usize = 10_000;

/// How close two records' due moments are for the later parked to wait for the earlier.
const IN_STEP: Duration = Duration::from_secs(1);

/// The records parked, each with the ticket it was handed out under and when it is due.
#[derive(Debug, Default)]
pub(crate) struct Parked {
    waiting: Mutex<Vec<Waiting>>,
}

#[derive(Debug)]
struct Waiting {
    message: OwnedMessage,
    ticket: Ticket,
    due: Instant,
}

impl Parked {
    /// Parks `message` (handed out under `ticket`) for `delay`; `false` where [`MOST`] are
    /// parked already.
    ///
    /// A record is never due before one of its partition parked earlier to come back at
    /// nearly the same moment (within [`IN_STEP`]): the consumer sends a key's waiting
    /// records back one by one, in their order, each to come back at one moment that each
    /// reckons a little differently, and they must come back in that order.
    pub(crate) fn park(&self, message: OwnedMessage, ticket: Ticket, delay: Duration) -> bool {
        let mut waiting = self.waiting.lock().unwrap_or_else(|e| e.into_inner());
        if waiting.len() >= MOST {
            return false;
        }
        let mut due = Instant::now() + delay;
        let partition = message.partition();
        if let Some(earlier) = waiting
            .iter()
            .filter(|w| w.message.partition() == partition && w.due > due && w.due - due < IN_STEP)
            .map(|w| w.due)
            .max()
        {
            due = earlier;
        }
        waiting.push(Waiting {
            message,
            ticket,
            due,
        });
        true
    }

    /// Up to `max` records whose delay is over, the earliest due first, with their tickets.
    pub(crate) fn due(&self, max: usize) -> Vec<(OwnedMessage, Ticket)> {
        let now = Instant::now();
        let mut waiting = self.waiting.lock().unwrap_or_else(|e| e.into_inner());
        if waiting.iter().all(|w| w.due > now) {
            return Vec::new();
        }
        waiting.sort_by_key(|w| w.due);
        let ready = waiting
            .iter()
            .take(max)
            .take_while(|w| w.due <= now)
            .count();
        waiting
            .drain(..ready)
            .map(|w| (w.message, w.ticket))
            .collect()
    }

    /// How many records are parked.
    pub(crate) fn len(&self) -> usize {
        self.waiting.lock().unwrap_or_else(|e| e.into_inner()).len()
    }

    /// When the next parked record is due, if any is parked.
    pub(crate) fn next_due(&self) -> Option<Instant> {
        let waiting = self.waiting.lock().unwrap_or_else(|e| e.into_inner());
        waiting.iter().map(|w| w.due).min()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rdkafka::Timestamp;
    use rdkafka::message::Message;

    fn record(offset: i64) -> OwnedMessage {
        on(0, offset)
    }

    fn on(partition: i32, offset: i64) -> OwnedMessage {
        OwnedMessage::new(
            None,
            None,
            "t".into(),
            Timestamp::NotAvailable,
            partition,
            offset,
            None,
        )
    }

    #[test]
    fn records_parked_to_come_back_together_come_back_in_the_order_parked() {
        let parked = Parked::default();
        // Each reckoned its delay a little later than the one before, and so a little shorter.
        for (offset, delay_ms) in [(10, 40), (11, 39), (12, 38)] {
            assert!(parked.park(record(offset), 1, Duration::from_millis(delay_ms)));
        }
        std::thread::sleep(Duration::from_millis(60));
        let due: Vec<i64> = parked.due(10).iter().map(|(m, _)| m.offset()).collect();
        assert_eq!(due, vec![10, 11, 12]);
        // Another partition's record is not held back by them.
        assert!(parked.park(on(1, 3), 1, Duration::ZERO));
        assert!(parked.park(record(13), 1, Duration::from_secs(60)));
        assert!(parked.park(on(2, 4), 1, Duration::ZERO));
        let due: Vec<i64> = parked.due(10).iter().map(|(m, _)| m.offset()).collect();
        assert_eq!(due, vec![3, 4]);
    }

    #[test]
    fn parked_records_come_back_once_due_the_earliest_first() {
        let parked = Parked::default();
        assert!(parked.park(on(1, 7), 1, Duration::from_millis(60)));
        assert!(parked.park(on(2, 5), 1, Duration::ZERO));
        assert!(parked.park(on(3, 6), 1, Duration::from_secs(60)));
        std::thread::sleep(Duration::from_millis(80));
        let due: Vec<i64> = parked.due(10).iter().map(|(m, _)| m.offset()).collect();
        assert_eq!(due, vec![5, 7]);
        assert!(parked.due(10).is_empty(), "the third is not due yet");
        assert!(parked.next_due().is_some());
    }
}
