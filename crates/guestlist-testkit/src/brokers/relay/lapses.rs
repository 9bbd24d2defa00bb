//! The relay's lease stories, on every broker and database: a round that outlasts its lease
//! keeps what was confirmed, and a lease that ran out without anyone taking it is renewed and
//! its round stamped.

use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use crate::Fixture;
use guestlist_sqlx::{OutboxMessage, Outcomes, Publish};

use super::line::Line;
use crate::brokers::Broker;

/// A real publisher whose confirmations reach the relay only after `hold`: a slow broker.
struct Slow<P> {
    inner: P,
    hold: Duration,
}

impl<P: Publish> Publish for Slow<P> {
    fn check(&self, message: &OutboxMessage) -> Result<(), guestlist_sqlx::PublishError> {
        self.inner.check(message)
    }

    async fn publish(&self, messages: &[OutboxMessage], outcomes: &mut Outcomes) {
        self.inner.publish(messages, outcomes).await;
        tokio::time::sleep(self.hold).await;
    }
}

/// A broker that takes longer to confirm a round than the relay's lease lasts: the relay
/// renews the lease while it waits, and stamps every confirmed message, once.
pub async fn a_round_that_outlasts_its_lease_stamps_what_was_confirmed<B: Broker, DB: Fixture>(
    name: &str,
) {
    const EVENTS: i64 = 40;
    let line = Line::<B, DB>::open(name).await;
    for n in 0..EVENTS {
        line.enqueue(&format!("evt_{n}"), &format!("order-{}", n % 4), true)
            .await;
    }
    let slow = Slow {
        inner: line.rig.broker.publisher().await,
        hold: Duration::from_millis(1_600),
    };
    let relay = line.relay(slow, Duration::from_secs(1)).batch(50);
    let relayed = relay
        .drain()
        .await
        .unwrap_or_else(|err| panic!("{}: {err}", B::LABEL))
        .expect("the lease is free");
    assert_eq!(
        relayed.published as i64,
        EVENTS,
        "{}: {relayed:?}",
        B::LABEL
    );
    let shards = line.outbox.shard_count(&line.rig.db.pool).await.unwrap();
    assert_eq!(
        relayed.leases_taken,
        u64::from(shards),
        "each shard's lease taken once, held through the round"
    );
    assert_eq!(line.pending().await, 0);
    let received = line.rig.broker.received().await;
    assert_eq!(received.len() as i64, EVENTS, "{}: each once", B::LABEL);
}

/// A real publisher during whose first round the relays' lease runs out in the database with no
/// other relay taking it: what a renewal held up on a busy machine looks like to the database.
struct Lapsing<P, DB: Fixture> {
    inner: P,
    pool: sqlx::Pool<DB>,
    lease_table: String,
    lapsed: AtomicBool,
}

impl<P: Publish, DB: Fixture> Publish for Lapsing<P, DB> {
    fn check(&self, message: &OutboxMessage) -> Result<(), guestlist_sqlx::PublishError> {
        self.inner.check(message)
    }

    async fn publish(&self, messages: &[OutboxMessage], outcomes: &mut Outcomes) {
        self.inner.publish(messages, outcomes).await;
        if self.lapsed.swap(true, Ordering::SeqCst) {
            return;
        }
        // The round's other statement (the last round's stamp) is done by now; then the lease
        // ends, and the relay's next renewal (a third of its lease after the round began) meets
        // it ended.
        tokio::time::sleep(Duration::from_millis(300)).await;
        let ended = format!(
            "UPDATE {} SET lease_until = {}",
            self.lease_table,
            DB::ago(1)
        );
        let mut conn = self.pool.acquire().await.unwrap();
        DB::exec(&mut conn, ended).await.unwrap();
        tokio::time::sleep(Duration::from_millis(1_200)).await;
    }
}

/// A lease that runs out in the database while a round waits on the broker, with no other relay
/// to take it (a renewal held up on a busy machine), is renewed with the relay's token: the
/// round's confirmed messages are stamped once, not published again under a new lease.
pub async fn a_lease_that_ran_out_untaken_is_renewed_and_its_round_stamped<
    B: Broker,
    DB: Fixture,
>(
    name: &str,
) {
    const EVENTS: i64 = 20;
    let line = Line::<B, DB>::open(name).await;
    for n in 0..EVENTS {
        line.enqueue(&format!("evt_{n}"), &format!("order-{}", n % 4), true)
            .await;
    }
    let lapsing = Lapsing {
        inner: line.rig.broker.publisher().await,
        pool: line.rig.db.pool.clone(),
        lease_table: format!("{}_relay", line.outbox.table()),
        lapsed: AtomicBool::new(false),
    };
    let relay = line.relay(lapsing, Duration::from_secs(3)).batch(50);
    let relayed = relay
        .drain()
        .await
        .unwrap_or_else(|err| panic!("{}: {err}", B::LABEL))
        .expect("the relay kept the lease nobody took");
    let shards = line.outbox.shard_count(&line.rig.db.pool).await.unwrap();
    assert_eq!(
        (relayed.published as i64, relayed.leases_taken),
        (EVENTS, u64::from(shards)),
        "{}: stamped under the leases taken once ({relayed:?})",
        B::LABEL
    );
    assert_eq!(line.pending().await, 0);
    let received = line.rig.broker.received().await;
    assert_eq!(received.len() as i64, EVENTS, "{}: each once", B::LABEL);
}
