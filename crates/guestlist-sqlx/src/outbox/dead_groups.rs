//! The outgoing dead letters grouped by failure: the topic, and the class of the broker's
//! refusal (its ids, numbers and quoted values taken out), so that the fifty messages one
//! missing stream refused are retried or dropped as one once it exists.

use std::collections::BTreeMap;
use std::time::Duration;

use crate::outbox::{DeadLetter, Outbox};
use crate::{Backend, Error};

/// The outgoing dead letters of one topic whose reasons share a class.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct OutgoingGroup {
    /// The group's short name ([`guestlist_core::failure_group`] of the topic and the class).
    pub id: String,
    /// The topic.
    pub topic: String,
    /// The reasons' class ([`guestlist_core::failure_class`]).
    pub class: String,
    /// One of its reasons, as written.
    pub example: String,
    /// How long ago its first member was dead-lettered.
    pub first_age: Duration,
    /// How long ago its last member was.
    pub last_age: Duration,
    /// Its members' ids (as [`Outbox::retry_dead`] takes them), the oldest first.
    pub ids: Vec<i64>,
}

impl DeadLetter {
    /// The class of its reason ([`guestlist_core::failure_class`]).
    pub fn class(&self) -> String {
        guestlist_core::failure_class(&self.reason)
    }

    /// The name of its failure group: its topic and its reason's class.
    pub fn group(&self) -> String {
        guestlist_core::failure_group(&self.topic, &self.class())
    }
}

impl OutgoingGroup {
    /// How many dead letters it holds.
    pub fn count(&self) -> usize {
        self.ids.len()
    }

    /// The groups of `letters`, the largest first.
    pub fn of(letters: &[DeadLetter]) -> Vec<OutgoingGroup> {
        let mut groups: BTreeMap<(String, String), OutgoingGroup> = BTreeMap::new();
        for letter in letters {
            let class = letter.class();
            let group = groups
                .entry((letter.topic.clone(), class.clone()))
                .or_insert_with(|| OutgoingGroup {
                    id: guestlist_core::failure_group(&letter.topic, &class),
                    topic: letter.topic.clone(),
                    class,
                    example: letter.reason.clone(),
                    first_age: letter.age,
                    last_age: letter.age,
                    ids: Vec::new(),
                });
            group.first_age = group.first_age.max(letter.age);
            group.last_age = group.last_age.min(letter.age);
            group.ids.push(letter.id);
        }
        let mut groups: Vec<OutgoingGroup> = groups.into_values().collect();
        groups.sort_by(|a, b| b.count().cmp(&a.count()).then(a.last_age.cmp(&b.last_age)));
        groups
    }
}

impl<DB: Backend> Outbox<DB> {
    /// The failure groups of the oldest `limit` outgoing dead letters, the largest first.
    pub async fn dead_groups(
        &self,
        pool: &sqlx::Pool<DB>,
        limit: u32,
    ) -> Result<Vec<OutgoingGroup>, Error> {
        Ok(OutgoingGroup::of(&self.dead_letters(pool, limit).await?))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn letter(id: i64, topic: &str, reason: &str, age_s: u64) -> DeadLetter {
        DeadLetter {
            id,
            message_id: format!("evt_{id}"),
            topic: topic.to_owned(),
            ordering_key: None,
            seq: 0,
            reason: reason.to_owned(),
            age: Duration::from_secs(age_s),
            payload_bytes: 2,
        }
    }

    #[test]
    fn refusals_alike_on_one_topic_form_one_group() {
        let letters = [
            letter(
                1,
                "orders.paid",
                "no stream takes topic orders.paid (attempt 10)",
                90,
            ),
            letter(
                2,
                "orders.paid",
                "no stream takes topic orders.paid (attempt 11)",
                30,
            ),
            letter(
                3,
                "orders.paid",
                "it takes 1200000 bytes, over max_payload",
                60,
            ),
            letter(
                4,
                "orders.shipped",
                "no stream takes topic orders.shipped (attempt 10)",
                5,
            ),
        ];
        let groups = OutgoingGroup::of(&letters);
        let summary: Vec<(&str, usize)> = groups
            .iter()
            .map(|g| (g.topic.as_str(), g.count()))
            .collect();
        assert_eq!(
            summary,
            [
                ("orders.paid", 2),
                ("orders.shipped", 1),
                ("orders.paid", 1)
            ]
        );
        assert_eq!(groups[0].ids, [1, 2]);
        assert_eq!(
            (groups[0].first_age, groups[0].last_age),
            (Duration::from_secs(90), Duration::from_secs(30))
        );
        assert_eq!(groups[0].id, letters[0].group());
    }
}
