//! Which messages of a batch RabbitMQ returned, told by their ids.
//!
//! RabbitMQ sends a mandatory message it cannot route back (`basic.return`) before its
//! publisher confirm. lapin hands each returned message to one of the confirmations it resolves
//! next, and when one `multiple` ack resolves several, in no particular order: a returned
//! message can ride on another message's confirmation, leaving its own bare. Taken as lapin
//! pairs them, a message no queue took would be stamped as published and one a queue took
//! would be retried. So the returned messages of a batch are gathered by their `message_id`,
//! each from whichever confirmation carries it, and a message counts as returned when its own
//! id was returned.

use std::collections::HashMap;

use futures_util::FutureExt;
use lapin::Confirmation;
use lapin::PublisherConfirm;
use lapin::message::BasicReturnMessage;

/// What RabbitMQ said of one message.
pub(crate) enum Verdict {
    /// Taken by a queue and confirmed.
    Acked,
    /// Routed nowhere: its reply code and text.
    Returned(u16, String),
    /// A negative confirm.
    Nacked,
    /// The channel had publisher confirms off.
    NotRequested,
}

/// A batch's confirmations, in publish order.
pub(crate) struct Confirms {
    /// Each message's confirmation, until it resolves (`None` for a message not sent).
    pending: Vec<Option<PublisherConfirm>>,
    /// Each message's resolved confirmation, stripped of the message it carried, until read.
    resolved: Vec<Option<lapin::Result<Confirmation>>>,
    /// The returned messages seen so far, by id: reply code and text.
    returned: HashMap<String, (u16, String)>,
    /// Returned messages without an id, by the message whose confirmation carried them.
    returned_unnamed: HashMap<usize, (u16, String)>,
}

impl Confirms {
    /// The confirmations of a batch, one per message (`None` where it was not sent).
    pub(crate) fn new(pending: Vec<Option<PublisherConfirm>>) -> Self {
        let count = pending.len();
        Self {
            pending,
            resolved: std::iter::repeat_with(|| None).take(count).collect(),
            returned: HashMap::new(),
            returned_unnamed: HashMap::new(),
        }
    }

    /// Waits for message `n`'s confirmation (its id `id`) and says what RabbitMQ did with it.
    pub(crate) async fn verdict(&mut self, n: usize, id: &str) -> lapin::Result<Verdict> {
        if self.resolved[n].is_none()
            && let Some(confirm) = self.pending[n].take()
        {
            let got = confirm.await;
            self.note(n, got);
            // Every confirmation resolved with or before this one is ready now, and the
            // message's own return, if it had one, rides on one of them.
            for later in n + 1..self.pending.len() {
                let ready = self.pending[later]
                    .as_mut()
                    .and_then(FutureExt::now_or_never);
                if let Some(got) = ready {
                    self.pending[later] = None;
                    self.note(later, got);
                }
            }
        }
        let confirmation = self.resolved[n]
            .take()
            .unwrap_or(Ok(Confirmation::NotRequested))?;
        let returned = self
            .returned
            .remove(id)
            .or_else(|| self.returned_unnamed.remove(&n));
        Ok(match (confirmation, returned) {
            (_, Some((code, text))) => Verdict::Returned(code, text),
            (Confirmation::Ack(_), None) => Verdict::Acked,
            (Confirmation::Nack(_), None) => Verdict::Nacked,
            (Confirmation::NotRequested, None) => Verdict::NotRequested,
        })
    }

    /// Keeps message `n`'s confirmation, gathering the returned message it carries by its id.
    fn note(&mut self, n: usize, got: lapin::Result<Confirmation>) {
        let got = got.map(|confirmation| match confirmation {
            Confirmation::Ack(carried) => {
                self.gather(n, carried);
                Confirmation::Ack(None)
            }
            Confirmation::Nack(carried) => {
                self.gather(n, carried);
                Confirmation::Nack(None)
            }
            Confirmation::NotRequested => Confirmation::NotRequested,
        });
        self.resolved[n] = Some(got);
    }

    fn gather(&mut self, n: usize, carried: Option<BasicReturnMessage>) {
        let Some(returned) = carried else {
            return;
        };
        let reply = (returned.reply_code, returned.reply_text.to_string());
        match returned.delivery.properties.message_id() {
            Some(id) => {
                self.returned.insert(id.to_string(), reply);
            }
            None => {
                self.returned_unnamed.insert(n, reply);
            }
        }
    }
}
