//! A relay whose traffic to the database stalls past its lease: another relay takes over, and
//! the stalled one, released, takes nothing back and stamps nothing.

use std::time::Duration;

use guestlist_sqlx::Relay;

use super::line::Line;
use crate::Fixture;
use crate::brokers::Broker;
use crate::brokers::graceful::stopped_within_grace;
use crate::fault_proxy::FaultProxy;
use crate::run_until_stopped;

/// Relay A holds the lease, its pool through a [`FaultProxy`]; every byte between A and the
/// database is held (a stall, not a cut: A's connections stay open) for longer than the lease
/// while ten more messages are committed. Relay B takes the lease over and publishes them.
/// Released, A's late statements find the lease gone: B keeps it, A publishes nothing more,
/// neither relay's run ends, and every message has one effect.
pub async fn a_relay_stalled_past_its_lease_takes_nothing_back<B: Broker, DB: Fixture>(name: &str) {
    const LEASE: Duration = Duration::from_secs(1);
    let line = Line::<B, DB>::open(name).await;
    line.single_shard().await;
    let (proxy, url) = FaultProxy::for_url(&line.rig.db.url).await;
    let pool = DB::connect(&url, 4)
        .await
        .expect("a pool through the proxy");
    let relay = |pool| async {
        Relay::new(line.outbox.clone(), pool, line.rig.broker.publisher().await)
            .lease(LEASE)
            .poll(Duration::from_millis(20))
            .batch(50)
    };
    let (stop_a, a) = run_until_stopped!(relay(pool).await);
    let enqueue = |from: usize| {
        let line = &line;
        async move {
            for n in from..from + 10 {
                line.enqueue(&format!("evt_{n}"), &format!("order-{}", n % 2), true)
                    .await;
            }
        }
    };
    enqueue(0).await;
    line.until_drained("relay A publishes the first ten").await;
    let a_lease = line.lease().await;

    proxy.stall();
    enqueue(10).await;
    tokio::time::sleep(LEASE + Duration::from_millis(500)).await;
    assert_eq!(
        line.pending().await,
        10,
        "a stalled relay publishes nothing"
    );
    let (stop_b, b) = run_until_stopped!(relay(line.rig.db.pool.clone()).await);
    line.until_drained("relay B takes over and publishes the next ten")
        .await;
    let b_lease = line.lease().await;
    assert!(
        b_lease.token > a_lease.token && b_lease.holder != a_lease.holder,
        "{}: B took the lease over ({a_lease:?} then {b_lease:?})",
        B::LABEL
    );
    proxy.release();
    tokio::time::sleep(LEASE).await;
    enqueue(20).await;
    line.until_drained("the last ten are published").await;
    let lease = line.lease().await;
    assert_eq!(
        (lease.token, &lease.holder),
        (b_lease.token, &b_lease.holder),
        "{}: A, released, took nothing back",
        B::LABEL
    );
    assert!(
        !a.is_finished() && !b.is_finished(),
        "{}: neither relay's run ended",
        B::LABEL
    );
    stop_a.send(()).unwrap();
    stop_b.send(()).unwrap();
    let (a, b) = (a.await.unwrap().unwrap(), b.await.unwrap().unwrap());
    assert_eq!(
        (a.published, b.published),
        (10, 20),
        "{}: A stamped nothing after its stall ({a:?}, {b:?})",
        B::LABEL
    );
    let handled = line.consume(30).await;
    assert_eq!(line.rig.effects().await, (30, 30), "{handled:?}");
}

/// Relay A holds the lease, its pool through a [`FaultProxy`], and is told to stop while every
/// byte between it and the database is held: its run returns within its shutdown grace rather
/// than wait on statements that will never be answered (an orchestrator would SIGKILL it at
/// its own deadline). Its lease, never given up, expires by itself: relay B then publishes
/// what was committed meanwhile, and every message has one effect.
pub async fn a_relay_told_to_stop_while_its_database_stalls_stops_within_its_grace<
    B: Broker,
    DB: Fixture,
>(
    name: &str,
) {
    const LEASE: Duration = Duration::from_secs(2);
    const GRACE: Duration = Duration::from_secs(1);
    let line = Line::<B, DB>::open(name).await;
    line.single_shard().await;
    let (proxy, url) = FaultProxy::for_url(&line.rig.db.url).await;
    let pool = DB::connect(&url, 4)
        .await
        .expect("a pool through the proxy");
    let relay = |pool| async {
        Relay::new(line.outbox.clone(), pool, line.rig.broker.publisher().await)
            .lease(LEASE)
            .poll(Duration::from_millis(20))
            .shutdown_grace(GRACE)
    };
    let (stop_a, a) = run_until_stopped!(relay(pool).await);
    for n in 0..10 {
        line.enqueue(&format!("evt_{n}"), "order-1", true).await;
    }
    line.until_drained("relay A publishes the first ten").await;

    proxy.stall();
    for n in 10..20 {
        line.enqueue(&format!("evt_{n}"), "order-1", true).await;
    }
    // A's next poll is sent into the stall and waits for an answer that does not come.
    tokio::time::sleep(Duration::from_millis(300)).await;
    let a = stopped_within_grace(B::LABEL, "relay A", stop_a, a, GRACE)
        .await
        .unwrap();
    assert_eq!(a.published, 10, "{}: {a:?}", B::LABEL);

    let (stop_b, b) = run_until_stopped!(relay(line.rig.db.pool.clone()).await);
    line.until_drained("relay B takes the lease over once it expires and publishes the next ten")
        .await;
    stop_b.send(()).unwrap();
    let b = b.await.unwrap().unwrap();
    assert_eq!(b.published, 10, "{}: {b:?}", B::LABEL);
    proxy.release();
    let handled = line.consume(20).await;
    assert_eq!(line.rig.effects().await, (20, 20), "{handled:?}");
}
