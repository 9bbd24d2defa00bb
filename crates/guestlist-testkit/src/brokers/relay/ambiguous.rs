//! The connection to the database dies while the relay's stamp commits: whatever the database
//! did with it, every message reaches the consumer and has one effect.

use std::time::{Duration, Instant};

use guestlist_sqlx::Relay;

use super::line::Line;
use crate::Fixture;
use crate::brokers::Broker;
use crate::fault_proxy::{self, Ambiguity, FaultProxy, Sprung};
use crate::held_commit::{Change, HeldCommit};

/// How the story cuts the connection of a stamp on each database.
enum StampCut {
    /// MariaDB renews the lease and stamps on a transaction: the proxy cuts the connection of
    /// its `COMMIT`, the one after the stamp's text.
    Trap(Sprung),
    /// PostgreSQL renews and stamps in one statement outside any transaction, its commit part
    /// of it: the commit is held open ([`HeldCommit`]) while the proxy cuts every connection,
    /// then let go (it lands) or its session ended (it is lost).
    Held(HeldCommit),
}

impl StampCut {
    async fn arm<DB: Fixture>(
        proxy: &FaultProxy,
        url: &str,
        table: &str,
        ambiguity: Ambiguity,
    ) -> Self {
        match DB::COMMIT_FRAME {
            // The relay's stamp deletes the rows the broker confirmed.
            Some(fault_proxy::POSTGRES_COMMIT) => {
                StampCut::Held(HeldCommit::on(url, table, Change::Delete).await)
            }
            Some(commit) => {
                let stamp = format!("DELETE FROM {table} WHERE id IN");
                StampCut::Trap(proxy.trap_after(stamp.as_bytes(), commit, ambiguity))
            }
            None => panic!("{}: a database with a wire", DB::LABEL),
        }
    }

    /// Waits for the stamp and cuts its connection, as `ambiguity` says.
    async fn spring(self, proxy: &FaultProxy, ambiguity: Ambiguity) {
        match self {
            StampCut::Trap(sprung) => sprung.wait(Duration::from_secs(30)).await,
            StampCut::Held(held) => {
                held.until_waiting().await;
                // Stalled first, so that no answer of the commit gets through while the cut
                // reaches every connection (on a loaded machine, a landed commit's answer did).
                proxy.stall();
                proxy.cut();
                if ambiguity == Ambiguity::Lost {
                    held.end_waiting().await;
                }
                held.release().await;
                tokio::time::sleep(Duration::from_millis(500)).await;
                proxy.release();
                proxy.mend();
            }
        }
    }
}

/// A relay whose pool goes through a [`FaultProxy`], and the connection of its stamp cut while
/// the stamp commits, once where the database committed it and once where it did not (five
/// messages each time, on two keys). The drain is not reported done; a later drain publishes
/// again what was not stamped; the broker or the consumer's inbox drops the repeats: ten
/// messages, ten effects.
pub async fn an_ambiguous_stamp_costs_no_message_and_no_second_effect<B: Broker, DB: Fixture>(
    name: &str,
) {
    const EACH: usize = 5;
    let line = Line::<B, DB>::open(name).await;
    let mut enqueued = 0;
    for ambiguity in [Ambiguity::Landed, Ambiguity::Lost] {
        for _ in 0..EACH {
            let key = format!("order-{}", enqueued % 2);
            line.enqueue(&format!("evt_{enqueued}"), &key, true).await;
            enqueued += 1;
        }
        let (proxy, url) = FaultProxy::for_url(&line.rig.db.url).await;
        let pool = DB::connect(&url, 4)
            .await
            .expect("a pool through the proxy");
        let relay = Relay::new(line.outbox.clone(), pool, line.rig.broker.publisher().await)
            .lease(Duration::from_secs(1))
            .poll(Duration::from_millis(20))
            .batch(50);
        let relay = std::sync::Arc::new(relay);
        let table = line.outbox.table().to_string();
        let cut = StampCut::arm::<DB>(&proxy, &line.rig.db.url, &table, ambiguity).await;
        let draining = tokio::spawn({
            let relay = relay.clone();
            async move { relay.drain().await }
        });
        cut.spring(&proxy, ambiguity).await;
        let first = draining.await.unwrap();
        let label = format!("{} on {} ({ambiguity:?})", B::LABEL, DB::LABEL);
        assert!(
            first.is_err(),
            "{label}: a stamp whose answer never came is no finished drain: {first:?}"
        );
        if ambiguity == Ambiguity::Landed {
            // A commit let go on PostgreSQL finishes on its own, a moment after.
            line.rig
                .until(Duration::from_secs(10), "the cut stamp lands", || async {
                    line.pending().await == 0
                })
                .await;
        }
        // The relay goes on: its lease given up, or (given up on a cut connection) run out.
        let started = Instant::now();
        let again = loop {
            match relay.drain().await {
                Ok(Some(again)) => break again,
                // Standing by (the lease not yet run out), or a connection of the pool that the
                // cut left broken, found by this drain: the relay's loop tries again.
                Ok(None) | Err(_) if started.elapsed() < Duration::from_secs(10) => {
                    tokio::time::sleep(Duration::from_millis(100)).await;
                }
                other => panic!("{label}: the next drain: {other:?}"),
            }
        };
        assert!(again.published as usize <= EACH, "{label}: {again:?}");
        assert_eq!(
            line.pending().await,
            0,
            "{label}: everything stamped in the end"
        );
    }
    let handled = line.consume(enqueued as i64).await;
    assert_eq!(
        line.rig.effects().await,
        (enqueued as i64, enqueued as i64),
        "{}: one effect each: {handled:?}",
        B::LABEL
    );
    assert_eq!(
        (handled.failed, handled.dead_lettered),
        (0, 0),
        "{handled:?}"
    );
}
