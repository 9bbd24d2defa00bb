//! One receive from a FIFO queue, by message group: a message handed back takes the later
//! messages of its group with it, so that the group comes again in its order.

use std::collections::HashMap;
use std::sync::{Mutex, PoisonError};

/// The messages of one receive, in the order SQS gave them (each group's order).
#[derive(Debug, Default)]
pub(crate) struct Groups {
    /// Each message's group and receipt handle, by its place in the receive.
    members: Vec<(String, String)>,
    /// Each group handed back, with the place of its first message handed back.
    handed_back: Mutex<HashMap<String, usize>>,
}

impl Groups {
    /// The receive's messages: (group, receipt handle) each, in order.
    pub(crate) fn new(members: Vec<(String, String)>) -> Self {
        Self {
            members,
            handed_back: Mutex::default(),
        }
    }

    /// Whether the message at `place` went back with an earlier message of its group.
    pub(crate) fn withdrawn(&self, place: usize) -> bool {
        let Some((group, _)) = self.members.get(place) else {
            return false;
        };
        let handed_back = self
            .handed_back
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        handed_back.get(group).is_some_and(|first| *first < place)
    }

    /// Hands the message at `place` back: the receipt handles of the later messages of its
    /// group that must go back with it (none already gone back).
    pub(crate) fn hand_back(&self, place: usize) -> Vec<String> {
        let Some((group, _)) = self.members.get(place) else {
            return Vec::new();
        };
        let mut handed_back = self
            .handed_back
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        let first = handed_back.entry(group.clone()).or_insert(place);
        if *first < place {
            return Vec::new(); // an earlier message took this one back already
        }
        *first = place;
        self.members
            .iter()
            .enumerate()
            .skip(place + 1)
            .filter(|(_, (other, _))| other == group)
            .map(|(_, (_, receipt))| receipt.clone())
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::Groups;

    fn groups() -> Groups {
        let members = [
            ("a", "a1"),
            ("b", "b1"),
            ("a", "a2"),
            ("a", "a3"),
            ("b", "b2"),
        ];
        Groups::new(
            members
                .iter()
                .map(|(g, r)| ((*g).to_owned(), (*r).to_owned()))
                .collect(),
        )
    }

    #[test]
    fn a_message_handed_back_takes_the_rest_of_its_group_only() {
        let groups = groups();
        assert!(!groups.withdrawn(2));
        assert_eq!(groups.hand_back(2), ["a3"]);
        assert!(!groups.withdrawn(0), "an earlier message stays");
        assert!(
            !groups.withdrawn(2),
            "the one handed back is settled, not withdrawn"
        );
        assert!(groups.withdrawn(3));
        assert!(
            !groups.withdrawn(1) && !groups.withdrawn(4),
            "the other group flows"
        );
    }

    #[test]
    fn an_earlier_hand_back_takes_what_a_later_one_took() {
        let groups = groups();
        assert_eq!(groups.hand_back(3), Vec::<String>::new());
        assert_eq!(groups.hand_back(0), ["a2", "a3"]);
        assert!(groups.withdrawn(2) && groups.withdrawn(3));
        assert_eq!(
            groups.hand_back(2),
            Vec::<String>::new(),
            "gone back already"
        );
    }
}
