//! A published batch's outcomes, sorted by what each one means: stamp it, count it against its
//! message, dead-letter it, wait out an outage, or nothing (withdrawn behind a failed head).

use std::collections::HashSet;

use guestlist_core::FailureKind;

use crate::backend::PendingRow;
use guestlist_core::{Confirmed, PublishError};

/// What a batch's outcomes say, row by row (indices into the batch's rows).
#[derive(Debug, Default)]
pub(crate) struct Settled {
    /// Rows the broker confirmed: every one is stamped, whatever failed beside it.
    pub(crate) stamp: Vec<i64>,
    /// Of the confirmed, those the broker dropped as repeats.
    pub(crate) duplicates: u64,
    /// Rows confirmed, by index.
    pub(crate) confirmed: Vec<usize>,
    /// The first failure of its key in the batch, the broker's refusal of the message itself:
    /// counted against it.
    pub(crate) refused: Vec<(usize, PublishError)>,
    /// Refused for good: dead-lettered now.
    pub(crate) unpublishable: Vec<(usize, PublishError)>,
    /// The first failure that was the broker's or the network's, not a message's.
    pub(crate) outage: Option<PublishError>,
    /// Failed outcomes of any kind (the broker did not confirm).
    pub(crate) failures: u64,
    /// Failures behind an earlier failure of their key in the batch: not counted against them.
    pub(crate) withdrawn: u64,
}

impl Settled {
    /// Sorts `outcomes`, one slot per row in order; an empty slot is a message the broker did
    /// not confirm in time (an outage: the confirmation may still be on its way).
    pub(crate) fn sort(
        rows: &[PendingRow],
        outcomes: Vec<Option<Result<Confirmed, PublishError>>>,
    ) -> Self {
        let mut settled = Self::default();
        let mut failed_keys: HashSet<&str> = HashSet::new();
        let mut outcomes = outcomes.into_iter();
        for (n, row) in rows.iter().enumerate() {
            let outcome = outcomes.next().flatten().unwrap_or_else(|| {
                Err(PublishError::outage(
                    "no confirmation before the relay's confirm timeout",
                ))
            });
            let err = match outcome {
                Ok(confirmed) => {
                    settled.stamp.push(row.id);
                    settled.confirmed.push(n);
                    settled.duplicates += u64::from(confirmed == Confirmed::Duplicate);
                    continue;
                }
                Err(err) => err,
            };
            settled.failures += 1;
            if let Some(key) = row.ordering_key.as_deref()
                && !failed_keys.insert(key)
            {
                // Its key's head failed first: it goes again after the head, uncounted.
                settled.withdrawn += 1;
                continue;
            }
            match err.kind() {
                FailureKind::Outage | FailureKind::NotYet | FailureKind::Withdrawn => {
                    settled.outage.get_or_insert(err);
                }
                FailureKind::Poison if err.is_permanent() => settled.unpublishable.push((n, err)),
                FailureKind::Poison => settled.refused.push((n, err)),
            }
        }
        settled
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn row(id: i64, key: Option<&str>) -> PendingRow {
        PendingRow::for_test(id, key)
    }

    #[test]
    fn every_confirmed_message_is_stamped_and_a_failure_counts_once_per_key() {
        let rows = [
            row(1, Some("a")),
            row(2, Some("b")),
            row(3, Some("a")),
            row(4, None),
            row(5, Some("a")),
            row(6, Some("c")),
            row(7, Some("d")),
        ];
        let outcomes = vec![
            Some(Err(PublishError::new("no route"))),
            Some(Ok(Confirmed::New)),
            Some(Err(PublishError::new("no route"))),
            Some(Ok(Confirmed::Duplicate)),
            Some(Ok(Confirmed::New)),
            Some(Err(PublishError::unpublishable("too large"))),
        ];
        let settled = Settled::sort(&rows, outcomes);
        // 5 was confirmed behind its failed head: stamped, not sent again.
        assert_eq!(settled.stamp, vec![2, 4, 5]);
        assert_eq!(settled.duplicates, 1);
        assert_eq!(
            settled
                .refused
                .iter()
                .map(|(n, _)| rows[*n].id)
                .collect::<Vec<_>>(),
            vec![1]
        );
        assert_eq!(settled.unpublishable.len(), 1);
        assert_eq!(settled.withdrawn, 1, "3 failed behind 1");
        // 7 had no outcome at all: the broker's silence, not the message's fault.
        assert!(settled.outage.is_some());
        assert_eq!(settled.failures, 4);
    }
}
