//! What a consumer runs with besides its source: the store, the handler and the settings, and
//! the counters every part of a batch's handling reports to.

use std::sync::Arc;
use std::time::Duration;

use guestlist_core::{HandlerName, Retention};
use guestlist_sqlx::{Backend, Health, Inbox};
use sqlx::Pool;

use crate::held_keys::HeldKeys;
use crate::keep_alive::KeepAlive;
use crate::{Delivery, Handler, IdFrom, KeyFrom};

/// What a consumer needs besides its source: the store, the handler and the settings.
pub(crate) struct Core<DB: Backend, H> {
    pub(crate) pool: Pool<DB>,
    pub(crate) inbox: Inbox<DB>,
    pub(crate) name: HandlerName,
    pub(crate) id_from: IdFrom,
    pub(crate) handler: Arc<H>,
    pub(crate) batch_size: usize,
    pub(crate) max_deliveries: u32,
    pub(crate) backoff: (Duration, Duration),
    pub(crate) handler_timeout: Duration,
    pub(crate) max_deferral: Duration,
    pub(crate) keep_alive: bool,
    pub(crate) retention: Option<Retention>,
    /// The source's ack wait, read when the consumer starts.
    pub(crate) ack_wait: Option<Duration>,
    /// Working, or waiting out an outage of the database.
    pub(crate) health: Health,
    /// The pauses between tries while the database is down: first, and longest.
    pub(crate) outage_backoff: (Duration, Duration),
    /// How long a run asked to stop may take to finish what it has in hand.
    pub(crate) shutdown_grace: Duration,
    /// Whether a batch's messages in steps run side by side, journaled together.
    pub(crate) together: bool,
    /// How many keys' messages are handled at once.
    pub(crate) concurrency: usize,
    /// Where a message's ordering key comes from.
    pub(crate) key_from: KeyFrom,
    /// The keys whose later messages wait behind one that went back.
    pub(crate) held: HeldKeys,
}

impl<DB: Backend, H: Handler<DB>> Core<DB, H> {
    /// Whether the inbox's tables are there and the database answers ([`Inbox::check`]).
    pub(crate) async fn probe(&self) -> Result<(), guestlist_sqlx::Error> {
        self.inbox.check(&self.pool, &self.name).await
    }

    /// Keeps `held`'s deliveries alive while they are worked on (or held through an outage),
    /// where the broker needs it.
    pub(crate) fn keep_alive_while<D: Delivery>(&self, held: &[Arc<D>]) -> KeepAlive {
        KeepAlive::start(self.ack_wait.filter(|_| self.keep_alive), held)
    }

    pub(crate) fn count(&self, outcome: &'static str, n: u64) {
        metrics::counter!("guestlist_consumer_messages_total", "handler" => self.name.as_str().to_owned(), "outcome" => outcome)
            .increment(n);
    }
}
