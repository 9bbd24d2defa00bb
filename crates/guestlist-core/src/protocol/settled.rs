//! A published batch's outcomes, sorted by what each one means: stamp it, count it against its
//! message, dead-letter it, wait out an outage, or nothing (withdrawn behind a failed head).

use std::collections::HashSet;

use crate::{Confirmed, FailureKind, PublishError};

/// What the sorting reads of a pending row: its id and its ordering key.
pub trait SettledRow {
    /// The row's id, the one its stamp names.
    fn id(&self) -> i64;
    /// The row's ordering key, if it has one.
    fn ordering_key(&self) -> Option<&str>;
}

/// What a batch's outcomes say, row by row (indices into the batch's rows).
#[derive(Debug, Default)]
pub struct Settled {
    /// Rows the broker confirmed: every one is stamped, whatever failed beside it.
    pub stamp: Vec<i64>,
    /// Of the confirmed, those the broker dropped as repeats.
    pub duplicates: u64,
    /// Rows confirmed, by index.
    pub confirmed: Vec<usize>,
    /// The first failure of its key in the batch, the broker's refusal of the message itself:
    /// counted against it.
    pub refused: Vec<(usize, PublishError)>,
    /// Refused for good: dead-lettered now.
    pub unpublishable: Vec<(usize, PublishError)>,
    /// The first failure that was the broker's or the network's, not a message's.
    pub outage: Option<PublishError>,
    /// Failed outcomes of any kind (the broker did not confirm).
    pub failures: u64,
    /// Failures behind an earlier failure of their key in the batch: not counted against them.
    pub withdrawn: u64,
}

impl Settled {
    /// Sorts `outcomes`, one slot per row in order; an empty slot is a message the broker did
    /// not confirm in time (an outage: the confirmation may still be on its way).
    pub fn sort<R: SettledRow>(
        rows: &[R],
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
                    settled.stamp.push(row.id());
                    settled.confirmed.push(n);
                    settled.duplicates += u64::from(confirmed == Confirmed::Duplicate);
                    continue;
                }
                Err(err) => err,
            };
            settled.failures += 1;
            if let Some(key) = row.ordering_key()
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

    struct Row(i64, Option<&'static str>);

    impl SettledRow for Row {
        fn id(&self) -> i64 {
            self.0
        }
        fn ordering_key(&self) -> Option<&str> {
            self.1
        }
    }

    #[test]
    fn every_confirmed_message_is_stamped_and_a_failure_counts_once_per_key() {
        let rows = [
            Row(1, Some("a")),
            Row(2, Some("b")),
            Row(3, Some("a")),
            Row(4, None),
            Row(5, Some("a")),
            Row(6, Some("c")),
            Row(7, Some("d")),
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
                .map(|(n, _)| rows[*n].0)
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
