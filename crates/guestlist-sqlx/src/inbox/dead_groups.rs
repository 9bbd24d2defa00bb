//! Incoming dead letters grouped by failure: the handler, and the class of the reason (the
//! reason with its ids, numbers and quoted values taken out), with how many and since when, so
//! that the fifty letters one bug made are looked at, retried or dropped as one.

use std::collections::BTreeMap;
use std::time::SystemTime;

use crate::inbox::dead::{DeadState, IncomingDeadLetter};
use crate::{Backend, Error, Inbox};

/// The dead letters of one handler whose reasons share a class.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct DeadGroup {
    /// The group's short name ([`guestlist_core::failure_group`]).
    pub id: String,
    /// The handler.
    pub handler: String,
    /// The reasons' class ([`guestlist_core::failure_class`]).
    pub class: String,
    /// One of its reasons, as written.
    pub example: String,
    /// When its first member was dead-lettered.
    pub first_at: SystemTime,
    /// When its last member was.
    pub last_at: SystemTime,
    /// Its members' message ids, the newest first.
    pub message_ids: Vec<String>,
}

impl DeadGroup {
    /// How many dead letters it holds.
    pub fn count(&self) -> usize {
        self.message_ids.len()
    }

    /// The groups of `letters` that are dead or being retried (retried ones left out), the
    /// largest first.
    pub fn of(letters: &[IncomingDeadLetter]) -> Vec<DeadGroup> {
        let mut groups: BTreeMap<(String, String), DeadGroup> = BTreeMap::new();
        for letter in letters.iter().filter(|l| l.state != DeadState::Retried) {
            let class = letter.class();
            let group = groups
                .entry((letter.handler.clone(), class.clone()))
                .or_insert_with(|| DeadGroup {
                    id: guestlist_core::failure_group(&letter.handler, &class),
                    handler: letter.handler.clone(),
                    class,
                    example: letter.reason.clone(),
                    first_at: letter.at,
                    last_at: letter.at,
                    message_ids: Vec::new(),
                });
            group.first_at = group.first_at.min(letter.at);
            group.last_at = group.last_at.max(letter.at);
            group.message_ids.push(letter.message_id.clone());
        }
        let mut groups: Vec<DeadGroup> = groups.into_values().collect();
        groups.sort_by(|a, b| b.count().cmp(&a.count()).then(b.last_at.cmp(&a.last_at)));
        groups
    }
}

impl<DB: Backend> Inbox<DB> {
    /// The groups of the newest `limit` dead letters that are dead or being retried, the
    /// largest first.
    pub async fn dead_groups(
        &self,
        pool: &sqlx::Pool<DB>,
        limit: u32,
    ) -> Result<Vec<DeadGroup>, Error> {
        let letters = self.dead_letters(pool, limit).await?;
        Ok(DeadGroup::of(&letters))
    }
}
