//! A batch sent in waves, so that a key's later messages are never on the wire while an earlier
//! one of its key is unconfirmed: the first message of every key (and every message without a
//! key) at once, then, once the broker has answered for them, the second of every key whose
//! first it confirmed, and so on. A refused message's followers are not sent at all: they stay
//! pending behind it. A batch whose keys are all different is one wave, sent as before.

use std::collections::{HashMap, HashSet};

use crate::backend::Backend;
use crate::outbox::relay::Relay;
use guestlist_core::{OutboxMessage, Outcomes, Publish};

impl<DB: Backend, P: Publish> Relay<DB, P> {
    /// Publishes `messages` with their outcomes in `outcomes` (one slot per message, in
    /// order): in waves by key, unless the relay pipelines a key's messages
    /// ([`Relay::pipeline_keys`]). A message not sent (behind a key whose earlier message the
    /// broker did not confirm) has no outcome.
    pub(super) async fn send(&self, messages: &[OutboxMessage], outcomes: &mut Outcomes) {
        let waves = match self.pipeline_keys {
            true => None,
            false => waves(messages),
        };
        let Some(waves) = waves else {
            self.publisher.publish(messages, outcomes).await;
            return;
        };
        let last = waves.iter().copied().max().unwrap_or(0);
        let mut stopped: HashSet<&str> = HashSet::new();
        for wave in 0..=last {
            let members: Vec<usize> = (0..messages.len())
                .filter(|&n| waves[n] == wave)
                .filter(|&n| {
                    messages[n]
                        .ordering_key
                        .as_deref()
                        .is_none_or(|key| !stopped.contains(key))
                })
                .collect();
            if members.is_empty() {
                continue;
            }
            let sent: Vec<OutboxMessage> = members.iter().map(|&n| messages[n].clone()).collect();
            let mut answered = Outcomes::with_capacity(sent.len());
            self.publisher.publish(&sent, &mut answered).await;
            for (&n, outcome) in members.iter().zip(answered.into_slots(sent.len())) {
                let confirmed = matches!(outcome, Some(Ok(_)));
                if !confirmed && let Some(key) = messages[n].ordering_key.as_deref() {
                    stopped.insert(key);
                }
                if let Some(outcome) = outcome {
                    outcomes.set(n, outcome);
                }
            }
        }
    }
}

/// Each message's wave: how many messages of its key come before it in the batch (0 for a
/// message without a key); `None` where every message is in the first.
fn waves(messages: &[OutboxMessage]) -> Option<Vec<usize>> {
    let mut seen: HashMap<&str, usize> = HashMap::new();
    let mut waves = Vec::with_capacity(messages.len());
    for message in messages {
        let wave = match message.ordering_key.as_deref() {
            Some(key) => {
                let before = seen.entry(key).or_default();
                *before += 1;
                *before - 1
            }
            None => 0,
        };
        waves.push(wave);
    }
    waves.iter().any(|&wave| wave > 0).then_some(waves)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn message(id: &str, key: Option<&str>) -> OutboxMessage {
        let mut message = OutboxMessage::new(id, "orders", b"{}".to_vec());
        message.ordering_key = key.map(str::to_owned);
        message
    }

    #[test]
    fn a_keys_later_messages_go_in_later_waves() {
        let batch = [
            message("1", Some("a")),
            message("2", Some("b")),
            message("3", Some("a")),
            message("4", None),
            message("5", Some("a")),
            message("6", Some("b")),
        ];
        assert_eq!(waves(&batch), Some(vec![0, 0, 1, 0, 2, 1]));
    }

    #[test]
    fn a_batch_of_different_keys_is_one_wave() {
        let batch = [
            message("1", Some("a")),
            message("2", None),
            message("3", None),
            message("4", Some("b")),
        ];
        assert_eq!(waves(&batch), None);
    }
}
