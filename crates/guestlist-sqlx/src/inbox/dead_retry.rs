//! Putting an incoming dead letter back: its kept copy published again to the handler's
//! source, for that handler only, under the id its inbox claims, in three steps that survive
//! the retrier dying between any two of them.
//!
//! 1. The row is marked `retrying` (by whom, when, the retry's number), if it is `dead`.
//! 2. The copy is published, with the retry's own broker id, and the broker confirms it.
//! 3. The row is marked `retried`, if it is still this retry's.
//!
//! A retrier that dies after 1 leaves the row `retrying`, never both dead and retried, and
//! never lost: the next [`Inbox::retry_dead`] of it publishes the same retry again (a broker
//! that deduplicates drops the repeat; the handler's inbox absorbs it where none does). A
//! retried message that fails again is dead-lettered again and is `dead` again, so that step 3
//! leaves it so.

use guestlist_core::{OutboxMessage, Outcomes, Publish, RETRY_FOR_HEADER, RETRY_OF_HEADER};

use crate::backend::inbox_dead::DeadSql;
use crate::backend::statement::Plain;
use crate::inbox::dead::{DeadState, IncomingDeadLetter};
use crate::{Backend, Error, Inbox};

/// What [`Inbox::retry_dead`] did.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum DeadRetry {
    /// Published again and confirmed by the broker: the retry's number (1 the first time).
    Retried {
        /// Which retry of the message this was.
        retry: u32,
    },
    /// No such dead letter.
    NotFound,
    /// Retried already, and not dead-lettered again since.
    AlreadyRetried,
    /// Recorded without a copy to publish (a body over
    /// [`KEPT_BODY_BYTES`](crate::inbox::KEPT_BODY_BYTES), no topic, or recorded before
    /// copies were kept): retry it from the broker's dead-letter place with the broker's tools.
    NoCopy,
}

impl<DB: Backend> Inbox<DB> {
    /// Puts the dead letter `id` of `handler` back on the handler's source through
    /// `publisher` (the relay's publisher for the broker), recording that `by` retried it.
    ///
    /// The message goes back with its body, key and headers, and two headers more: it is for
    /// `handler` only ([`RETRY_FOR_HEADER`]: the consumers of other handlers on the same
    /// subject or topic acknowledge it without running) and is claimed under `id`
    /// ([`RETRY_OF_HEADER`]), so that its handler runs it once, however often it is retried or
    /// repeated. A row left `retrying` by a retrier that died is finished here.
    ///
    /// An error from the broker leaves the row `retrying`: retry it again once the broker is
    /// back.
    pub async fn retry_dead<P: Publish>(
        &self,
        pool: &sqlx::Pool<DB>,
        publisher: &P,
        handler: &str,
        id: &str,
        by: &str,
    ) -> Result<DeadRetry, Error> {
        let now_ms = crate::unix_ms::now();
        let mut conn = pool.acquire().await?;
        let mark = Plain::new(|sql: &DeadSql| &sql.begin_retry, (now_ms, by, handler, id));
        DB::run(&mut conn, &*self.dead, mark)
            .await
            .map_err(|err| self.dead_error(err))?;
        drop(conn);
        let Some(letter) = self.dead_letter(pool, handler, id).await? else {
            return Ok(DeadRetry::NotFound);
        };
        match letter.state {
            DeadState::Retried => return Ok(DeadRetry::AlreadyRetried),
            DeadState::Dead => return Ok(DeadRetry::NoCopy),
            DeadState::Retrying => {}
        }
        let retry = letter.retries;
        // A row marked has its copy (the mark asks for one; a new record makes it dead again).
        let Some(message) = retry_message(&letter) else {
            return Ok(DeadRetry::NoCopy);
        };
        publisher.check(&message).map_err(Error::Publish)?;
        let mut outcomes = Outcomes::with_capacity(1);
        publisher
            .publish(std::slice::from_ref(&message), &mut outcomes)
            .await;
        if let Some(Err(err)) = outcomes.into_results(1).pop() {
            return Err(Error::Publish(err));
        }
        let mut conn = pool.acquire().await?;
        let confirm = Plain::new(
            |sql: &DeadSql| &sql.end_retry,
            (handler, id, i64::from(retry)),
        );
        DB::run(&mut conn, &*self.dead, confirm)
            .await
            .map_err(|err| self.dead_error(err))?;
        Ok(DeadRetry::Retried { retry })
    }
}

/// The header the publishers carry a keyed message's ordering key in.
const KEY_HEADER: &str = "guestlist-ordering-key";
/// The header the publishers carry a keyed message's place in.
const SEQ_HEADER: &str = "guestlist-seq";

/// The message that retry `letter.retries` of `letter` publishes: `None` without a copy.
fn retry_message(letter: &IncomingDeadLetter) -> Option<OutboxMessage> {
    let (topic, body) = (letter.topic.as_ref()?, letter.body.as_ref()?);
    let mut message = OutboxMessage::new(
        guestlist_core::retry_broker_id(&letter.handler, &letter.message_id, letter.retries),
        topic.clone(),
        body.clone(),
    );
    message.ordering_key = letter.key.clone();
    let header = |name: &str| {
        letter
            .headers
            .iter()
            .find(|(n, _)| n.eq_ignore_ascii_case(name))
            .map(|(_, value)| value.as_str())
    };
    // A keyed message keeps its place among its key's, which the publishers write themselves.
    let keyed = message.ordering_key.is_some();
    if keyed {
        message.seq = header(SEQ_HEADER)
            .and_then(|seq| seq.parse().ok())
            .unwrap_or(0);
    }
    message.headers = letter
        .headers
        .iter()
        // The publishers write the broker id themselves (`message-id`: the retry's own), and
        // a keyed message's key and place.
        .filter(|(name, _)| {
            let own = |header: &&str| name.eq_ignore_ascii_case(header);
            let written = [RETRY_FOR_HEADER, RETRY_OF_HEADER, "message-id"]
                .iter()
                .any(own);
            let placed = keyed && [KEY_HEADER, SEQ_HEADER].iter().any(own);
            !(written || placed)
        })
        .cloned()
        .chain([
            (RETRY_FOR_HEADER.to_owned(), letter.handler.clone()),
            (RETRY_OF_HEADER.to_owned(), letter.message_id.clone()),
        ])
        .collect();
    Some(message)
}

#[cfg(test)]
mod tests {
    use std::time::SystemTime;

    use super::*;

    fn letter(key: Option<&str>) -> IncomingDeadLetter {
        let headers = [
            ("message-id", "evt_1"),
            ("Guestlist-Ordering-Key", "order-7"),
            ("guestlist-seq", "12"),
            ("x-tenant", "acme"),
            (RETRY_OF_HEADER, "stale"),
        ];
        IncomingDeadLetter {
            handler: "warehouse".to_owned(),
            message_id: "evt_1".to_owned(),
            reason: "boom".to_owned(),
            deliveries: 5,
            at: SystemTime::now(),
            topic: Some("orders.paid".to_owned()),
            key: key.map(str::to_owned),
            state: DeadState::Retrying,
            retries: 2,
            retried_at: None,
            retried_by: None,
            body_bytes: Some(2),
            preview: b"{}".to_vec(),
            headers: headers
                .iter()
                .map(|(n, v)| ((*n).to_owned(), (*v).to_owned()))
                .collect(),
            body: Some(b"{}".to_vec()),
        }
    }

    fn names(message: &OutboxMessage) -> Vec<(&str, &str)> {
        message
            .headers
            .iter()
            .map(|(n, v)| (n.as_str(), v.as_str()))
            .collect()
    }

    #[test]
    fn a_retry_is_addressed_to_its_handler_under_its_id_with_the_original_headers() {
        let unkeyed = retry_message(&letter(None)).unwrap();
        assert_eq!(
            unkeyed.message_id,
            guestlist_core::retry_broker_id("warehouse", "evt_1", 2)
        );
        assert_eq!((unkeyed.topic.as_str(), unkeyed.seq), ("orders.paid", 0));
        assert_eq!(
            names(&unkeyed),
            [
                ("Guestlist-Ordering-Key", "order-7"),
                ("guestlist-seq", "12"),
                ("x-tenant", "acme"),
                (RETRY_FOR_HEADER, "warehouse"),
                (RETRY_OF_HEADER, "evt_1"),
            ],
            "the broker's own id and the stale retry headers go; the rest stays"
        );
        // Keyed (a Kafka record key, an SQS group): the publisher writes the key and the
        // place, which come from the original.
        let keyed = retry_message(&letter(Some("order-7"))).unwrap();
        assert_eq!(
            (keyed.ordering_key.as_deref(), keyed.seq),
            (Some("order-7"), 12)
        );
        assert_eq!(
            names(&keyed),
            [
                ("x-tenant", "acme"),
                (RETRY_FOR_HEADER, "warehouse"),
                (RETRY_OF_HEADER, "evt_1"),
            ]
        );
    }
}
