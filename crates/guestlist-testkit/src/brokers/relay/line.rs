//! A test's producer side (its outbox) in front of the consumer's rig, and what a relay child
//! process reads from its environment.

use std::collections::{BTreeMap, BTreeSet, HashSet};
use std::process::Child;
use std::time::Duration;

use crate::Fixture;
use guestlist_consumer::Handled;
use guestlist_core::{MessageId, OrderingKey, Topic};
use guestlist_sqlx::{Outbox, Outgoing, Publish, Relay};

use crate::brokers::Broker;
use crate::brokers::rig::{Rig, order_paid};
use crate::run_until_stopped;

/// What a relay child process reads from its environment besides its story's tag and database
/// ([`parent`](crate::brokers::child::parent)): the file it writes once the broker confirmed a
/// batch, whether it then stops itself (SIGSTOP), how long it then holds the batch unstamped,
/// and its lease.
pub(super) const CHILD_MARKER: &str = "GUESTLIST_RELAY_MARKER";
pub(super) const CHILD_STOPS: &str = "GUESTLIST_RELAY_STOPS";
pub(super) const CHILD_HOLD_MS: &str = "GUESTLIST_RELAY_HOLD_MS";
pub(super) const CHILD_LEASE_MS: &str = "GUESTLIST_RELAY_LEASE_MS";

/// A test's producer side (its outbox) in front of the consumer's rig.
pub struct Line<B: Broker, DB: Fixture> {
    /// The consumer's side: the broker queue, the inbox and the effects table.
    pub rig: Rig<B, DB>,
    /// The producer's outbox, on the same database.
    pub outbox: Outbox<DB>,
}

impl<B: Broker, DB: Fixture> Line<B, DB> {
    /// A fresh line (queue, inbox, effects table and outbox) for the test `name`.
    pub async fn open(name: &str) -> Self {
        Self::fresh(Rig::open(name, Duration::from_secs(30)).await).await
    }

    /// [`Line::open`] around a broker queue made for the test `name` already.
    pub async fn open_on(broker: B, name: &str) -> Self {
        Self::fresh(Rig::open_on(broker, name).await).await
    }

    /// [`Line::open`] on the database at `url` (a server of the test's own).
    pub async fn open_at(name: &str, url: &str) -> Self {
        Self::fresh(Rig::open_at(name, Duration::from_secs(30), url).await).await
    }

    async fn fresh(rig: Rig<B, DB>) -> Self {
        let line = Self::around(rig);
        let table = line.outbox.table().to_string();
        for table in [
            format!("{table}_keys"),
            format!("{table}_relay"),
            format!("{table}_relays"),
            format!("{table}_dead"),
            table,
        ] {
            line.rig
                .db
                .exec(format!("DROP TABLE IF EXISTS {table}"))
                .await;
        }
        line.outbox.migrate(&line.rig.db.pool).await.unwrap();
        line
    }

    fn around(rig: Rig<B, DB>) -> Self {
        let outbox = Outbox::with_table(&format!("ob_{}", rig.tag)).unwrap();
        Self { rig, outbox }
    }

    /// The line of test `tag`, from a child process.
    pub async fn attach(tag: &str, url: &str) -> Self {
        Self::around(Rig::attach(tag, url, Duration::from_secs(30)).await)
    }

    /// A relay of this outbox through `publisher`, quick to notice and to take over.
    pub fn relay<P: Publish>(&self, publisher: P, lease: Duration) -> Relay<DB, P> {
        Relay::new(self.outbox.clone(), self.rig.db.pool.clone(), publisher)
            .lease(lease)
            .poll(Duration::from_millis(20))
            .batch(50)
    }

    /// Enqueues the OrderPaid event `id` on `key`, and commits it or rolls it back.
    pub async fn enqueue(&self, id: &str, key: &str, commit: bool) {
        let message = self.order_paid(id, key);
        let mut tx = self.rig.db.pool.begin().await.unwrap();
        let enqueued = self.outbox.enqueue(&mut *tx, &message).await.unwrap();
        assert!(enqueued.added);
        if commit {
            tx.commit().await.unwrap();
        } else {
            tx.rollback().await.unwrap();
        }
    }

    /// Enqueues the OrderPaid events `(id, key)` on one transaction, and commits it.
    pub async fn enqueue_all(&self, events: &[(String, String)]) {
        let mut tx = self.rig.db.pool.begin().await.unwrap();
        for (id, key) in events {
            let enqueued = self
                .outbox
                .enqueue(&mut *tx, &self.order_paid(id, key))
                .await
                .unwrap();
            assert!(enqueued.added);
        }
        tx.commit().await.unwrap();
    }

    /// Enqueues and commits the OrderPaid event `id` on `key` until it is in (a commit that
    /// failed may have landed: the next try then finds it there); fails, with the last error,
    /// where the database refused it for two minutes.
    pub async fn enqueue_until_in(&self, id: &str, key: &str) -> u32 {
        let message = self.order_paid(id, key);
        let mut failures = 0;
        let started = std::time::Instant::now();
        loop {
            let enqueued = async {
                let mut tx = self.rig.db.pool.begin().await?;
                self.outbox.enqueue(&mut *tx, &message).await?;
                tx.commit().await?;
                Ok::<_, guestlist_sqlx::Error>(())
            };
            match enqueued.await {
                Ok(()) => return failures,
                Err(err) => {
                    assert!(
                        started.elapsed() < Duration::from_secs(120),
                        "{}: {id} refused for two minutes; the last time: {err}",
                        B::LABEL
                    );
                    failures += 1;
                    tokio::time::sleep(Duration::from_millis(50)).await;
                }
            }
        }
    }

    fn order_paid(&self, id: &str, key: &str) -> Outgoing {
        Outgoing::new(Topic::new(self.rig.broker.topic()).unwrap(), order_paid(id))
            .id(MessageId::new(id).unwrap())
            .ordering_key(OrderingKey::new(key).unwrap())
    }

    /// Asserts that the broker received each of `messages` ids, and each of `keys` keys'
    /// messages in the order of their places (repeats aside); returns how many arrived in all.
    pub(super) async fn assert_received_in_key_order(&self, messages: usize, keys: usize) -> usize {
        self.received_in_key_order(messages, keys, true).await
    }

    /// [`Line::assert_received_in_key_order`] where a writer retried commits whose answer was
    /// lost: a retry that came after the relay had published and deleted the first (its commit
    /// had landed) is a new row with the next place, a repeat the broker drops by its id. Its
    /// place is then missing from the key's: the places that arrive still rise, without gaps
    /// elsewhere than such repeats.
    pub(super) async fn assert_received_in_rising_key_order(
        &self,
        messages: usize,
        keys: usize,
    ) -> usize {
        self.received_in_key_order(messages, keys, false).await
    }

    async fn received_in_key_order(&self, messages: usize, keys: usize, gapless: bool) -> usize {
        let received = self.rig.broker.received().await;
        let ids: HashSet<&str> = received.iter().map(|m| m.id.as_str()).collect();
        assert_eq!(ids.len(), messages, "{}: nothing lost", B::LABEL);
        let mut firsts: BTreeMap<String, Vec<i64>> = BTreeMap::new();
        let mut seen: BTreeSet<(String, i64)> = BTreeSet::new();
        for message in &received {
            let key = message.key.clone().expect("every message has a key");
            if seen.insert((key.clone(), message.seq)) {
                firsts.entry(key).or_default().push(message.seq);
            }
        }
        assert_eq!(firsts.len(), keys);
        for (key, seqs) in firsts {
            if gapless {
                let expected: Vec<i64> = (1..=seqs.len() as i64).collect();
                assert_eq!(seqs, expected, "{key}: in commit order, none missing");
            } else {
                assert!(
                    seqs.windows(2).all(|pair| pair[0] < pair[1]),
                    "{key}: in commit order: {seqs:?}"
                );
            }
        }
        received.len()
    }

    /// Outbox rows not yet published.
    pub async fn pending(&self) -> u64 {
        self.outbox.stats(&self.rig.db.pool).await.unwrap().pending
    }

    /// Waits up to a minute until nothing is pending in the outbox; fails naming `what`.
    pub async fn until_drained(&self, what: &str) {
        self.rig
            .until(Duration::from_secs(60), what, || async {
                self.pending().await == 0
            })
            .await;
    }

    /// Of the `enqueued` messages enqueued so far, those published: no longer in the outbox
    /// (a relay deletes a message's row once the broker confirmed it) nor among its dead
    /// letters.
    pub async fn published_of(&self, enqueued: u64) -> u64 {
        let pool = &self.rig.db.pool;
        let rows = self.outbox.stats(pool).await.unwrap().rows;
        let dead = self.outbox.dead_count(pool).await.unwrap();
        enqueued.saturating_sub(rows + dead)
    }

    /// Waits until the database says every shard's lease has run out, and the relay's
    /// heartbeat with them: a stopped or killed holder renews them no more, though a renewal it
    /// sent just before may still land, later on a busy machine than any fixed pause allows for.
    /// (A relay that starts while a dead one still counts takes only its share at first.)
    pub(super) async fn until_lease_ran_out(&self) {
        self.rig
            .until(Duration::from_secs(30), "the leases ran out", || async {
                let stats = self.outbox.stats(&self.rig.db.pool).await.unwrap();
                stats.unheld().len() == stats.shards.len() && stats.relays.is_empty()
            })
            .await;
    }

    /// Gives the table a single shard, for the stories of relays taking turns through one
    /// lease (a standby taking over, a stalled holder fenced off).
    pub(super) async fn single_shard(&self) {
        self.outbox
            .set_shards(&self.rig.db.pool, 1, Duration::from_secs(5))
            .await
            .unwrap();
    }

    /// The single shard's lease (see [`Line::single_shard`]).
    pub(super) async fn lease(&self) -> guestlist_sqlx::RelayLease {
        let stats = self.outbox.stats(&self.rig.db.pool).await.unwrap();
        assert_eq!(stats.shards.len(), 1, "a story of one lease");
        stats.shards[0].lease.clone()
    }

    /// The oldest `limit` outgoing dead letters.
    pub async fn dead_letters(&self, limit: u32) -> Vec<guestlist_sqlx::DeadLetter> {
        self.outbox
            .dead_letters(&self.rig.db.pool, limit)
            .await
            .unwrap()
    }

    /// Runs the consumer until `events` distinct events have their effect and the queue is
    /// drained.
    pub async fn consume(&self, events: i64) -> Handled {
        let consumer = self.rig.consumer(50).await;
        let (stop, task) = run_until_stopped!(consumer);
        self.rig
            .until(
                Duration::from_secs(60),
                "every event has its effect and the queue is drained",
                || async {
                    self.rig.effects().await.1 == events && self.rig.broker.drained().await
                },
            )
            .await;
        stop.send(()).unwrap();
        task.await.unwrap().unwrap()
    }

    /// Starts the relay child `child` of this test's module with `env`.
    pub(super) fn child(&self, name: &str, child: &str, env: &[(&str, String)]) -> Child {
        self.rig.child(name, child, env)
    }
}

/// The lease holder's name of the chaos relay with process id `pid`.
pub(super) fn relay_name(pid: u32) -> String {
    format!("chaos-relay-{pid}")
}

pub(super) fn env_ms(var: &str) -> u64 {
    std::env::var(var).unwrap().parse().unwrap()
}
