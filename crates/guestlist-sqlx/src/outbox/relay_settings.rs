//! A relay's settings: what [`Relay::new`] starts from and what each builder method changes.

use std::time::Duration;

use guestlist_core::Backoff;

use crate::backend::{Backend, Stamp};
use crate::fencing::new_token;
use crate::outbox::{Outbox, Relay};
use crate::{Health, Publish};

impl<DB: Backend, P: Publish> Relay<DB, P> {
    /// Messages per round unless set.
    pub const DEFAULT_BATCH: usize = 500;
    /// The lease unless set: how long a crashed relay keeps its successor waiting.
    pub const DEFAULT_LEASE: Duration = Duration::from_secs(10);
    /// How often an idle relay looks for messages without a notification, unless set.
    pub const DEFAULT_POLL: Duration = Duration::from_millis(500);
    /// Refusals of one message before it is dead-lettered, unless set.
    pub const DEFAULT_MAX_ATTEMPTS: u32 = 10;
    /// How long a round waits for the broker's confirmations, unless set.
    pub const DEFAULT_CONFIRM_TIMEOUT: Duration = Duration::from_secs(45);
    /// How long a relay asked to stop may take to finish, unless set.
    pub const DEFAULT_SHUTDOWN_GRACE: Duration = Duration::from_secs(10);

    /// A relay publishing `outbox`'s messages, read from `pool`, with `publisher`.
    pub fn new(outbox: Outbox<DB>, pool: sqlx::Pool<DB>, publisher: P) -> Self {
        let holder = format!(
            "relay-{}-{:08x}",
            std::process::id(),
            new_token().unwrap_or_default() as u32
        );
        let health = Health::new("relay", outbox.table().as_str());
        Self {
            outbox,
            pool,
            publisher,
            batch: Self::DEFAULT_BATCH,
            lease: Self::DEFAULT_LEASE,
            poll: Self::DEFAULT_POLL,
            holder,
            backoff: (Backoff::DEFAULT_FIRST, Backoff::DEFAULT_MAX),
            max_attempts: Self::DEFAULT_MAX_ATTEMPTS,
            confirm_timeout: Self::DEFAULT_CONFIRM_TIMEOUT,
            shutdown_grace: Self::DEFAULT_SHUTDOWN_GRACE,
            pipeline_keys: false,
            health,
            stamp: Stamp::Delete,
        }
    }

    /// Keeps each published message's row, stamped with when it was published (`published_at`),
    /// until [`Outbox::purge`] deletes it by age, instead of deleting it once the broker has
    /// confirmed it (the default).
    ///
    /// Kept rows answer "was it published, and when?" in the table itself, and make an enqueue
    /// retried after its message went out (a commit whose answer was lost, tried again) add
    /// nothing, as it does while the message is pending. They cost a second row version and
    /// its index entries per message (the relay's stamp becomes an `UPDATE`: in the guide's
    /// performance chapter, the database's work per message rises from a `DELETE`'s to a few
    /// times that), and a purge to run. Without them, such a retry publishes its message a
    /// second time, which the consumers' inbox drops as a duplicate (its id is the same).
    pub fn keep_published(mut self, keep: bool) -> Self {
        self.stamp = if keep { Stamp::Keep } else { Stamp::Delete };
        self
    }

    /// At most `messages` per round (at least 1).
    pub fn batch(mut self, messages: usize) -> Self {
        self.batch = messages.max(1);
        self
    }

    /// The lease's length (at least 100 ms): the longest a crashed relay keeps a standing-by
    /// one waiting. A round that waits longer for its confirmations renews it meanwhile.
    pub fn lease(mut self, lease: Duration) -> Self {
        self.lease = lease.max(Duration::from_millis(100));
        self
    }

    /// How often an idle relay looks for messages without being woken, and a standing-by one
    /// for an expired lease.
    pub fn poll(mut self, every: Duration) -> Self {
        self.poll = every.max(Duration::from_millis(1));
        self
    }

    /// The name this relay holds the lease under, for operators (`guestlist stats`).
    /// Defaults to `relay-<pid>-<random>`; give each relay its own.
    pub fn holder(mut self, name: impl Into<String>) -> Self {
        self.holder = name.into();
        self
    }

    /// The pause after a failure, doubling up to `max` (0.2 s to 5 s unless set): per ordering
    /// key for a message the broker refused, for the whole relay in an outage.
    pub fn backoff(mut self, first: Duration, max: Duration) -> Self {
        self.backoff = (first, max.max(first));
        self
    }

    /// How many times the broker may refuse one message before it moves to the outgoing dead
    /// letters (default 10, at least 1). A message the broker can never take (too large, an id
    /// it cannot carry: [`Publish::check`]) goes there at once; an outage counts against none.
    pub fn max_attempts(mut self, attempts: u32) -> Self {
        self.max_attempts = attempts.max(1);
        self
    }

    /// How long a round waits for the broker's confirmations (default 45 s). Those given by
    /// then are stamped; the rest count as an outage, and the next rounds take half as many
    /// messages until a round fits again.
    pub fn confirm_timeout(mut self, limit: Duration) -> Self {
        self.confirm_timeout = limit.max(Duration::from_millis(10));
        self
    }

    /// Whether a key's later messages in a round go out pipelined behind its earlier ones
    /// (default off). Off, a round sends them in waves: a key's next message only once the
    /// broker confirmed the one before, so that a refused message's followers never reach the
    /// broker before it. On, a round costs one wait for the broker however many messages a key
    /// has in it, but when the broker refuses a message, the later messages of its key sent in
    /// the same round may be stored already: they reach the consumers before it (stamped, never
    /// sent again).
    pub fn pipeline_keys(mut self, on: bool) -> Self {
        self.pipeline_keys = on;
        self
    }

    /// Whether the relay is publishing or waiting out an outage, for a service's `/readyz`.
    pub fn health(&self) -> Health {
        self.health.clone()
    }

    /// How long [`run`](Self::run) may take to stop once its shutdown has come (default 10 s,
    /// under an orchestrator's usual 30 s before SIGKILL): the round under way is stamped and
    /// the lease given up within it. Past it, as when a database or broker holds its
    /// connection open and never answers, the run returns where it stands, like a crash: its
    /// lease expires by itself, and messages the broker confirmed but the relay did not stamp
    /// go out again, which the consumers' inbox absorbs.
    pub fn shutdown_grace(mut self, grace: Duration) -> Self {
        self.shutdown_grace = grace;
        self
    }
}
