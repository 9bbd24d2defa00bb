//! The connection to the database dies after the consumer's `COMMIT` went out: whatever the
//! database did, every event ends with one effect, and nothing is dead-lettered.

use std::time::Duration;

use crate::Fixture;
use crate::brokers::Broker;
use crate::brokers::rig::{Rig, order_paid};
use crate::fault_proxy::{Ambiguity, FaultProxy};
use crate::run_until_stopped;

/// How long a trap waits for the consumer's commit.
const PATIENCE: Duration = Duration::from_secs(60);

/// The consumer's pool goes through a [`FaultProxy`] that cuts the connection of one commit
/// after the database committed it (the consumer hears nothing), then of another before the
/// database saw it. Both deliveries go back to the broker unacknowledged; the first comes back
/// a duplicate, the second runs once; ten events, ten effects, nothing failed or
/// dead-lettered, and the consumer never stopped.
pub async fn an_ambiguous_commit_is_answered_by_the_redelivery<B: Broker, DB: Fixture>(name: &str) {
    let frame = DB::COMMIT_FRAME.expect("a database with a wire");
    let rig = Rig::<B, DB>::open(name, Duration::from_secs(5)).await;
    let (proxy, url) = FaultProxy::for_url(&rig.db.url).await;
    let pool = DB::connect(&url, 4)
        .await
        .expect("a pool through the proxy");
    let consumer = rig
        .consumer_on(pool, rig.inbox.clone())
        .await
        .max_deliveries(3)
        .outage_backoff(Duration::from_millis(100), Duration::from_secs(1));
    let landed = proxy.trap(frame, Ambiguity::Landed);
    let (stop, task) = run_until_stopped!(consumer);

    rig.broker.publish(&order_paid("evt_0")).await;
    landed.wait(PATIENCE).await;
    assert_eq!(
        rig.effects().await,
        (1, 1),
        "{}: the commit that landed was the handler's",
        B::LABEL
    );
    let lost = proxy.trap(frame, Ambiguity::Lost);
    rig.broker.publish(&order_paid("evt_1")).await;
    lost.wait(PATIENCE).await;
    for n in 2..10 {
        rig.broker.publish(&order_paid(&format!("evt_{n}"))).await;
    }
    rig.until(
        Duration::from_secs(90),
        "every event is handled once its redelivery comes",
        || async { rig.effects().await.1 == 10 && rig.broker.drained().await },
    )
    .await;
    stop.send(()).unwrap();
    let handled = task.await.unwrap().unwrap();
    assert_eq!(
        rig.effects().await,
        (10, 10),
        "{}: one effect each",
        B::LABEL
    );
    assert_eq!(
        (handled.failed, handled.dead_lettered),
        (0, 0),
        "{}: an unknown commit counts against no message: {handled:?}",
        B::LABEL
    );
    assert!(
        handled.duplicates >= 1,
        "{}: the landed commit's redelivery was a duplicate: {handled:?}",
        B::LABEL
    );
    assert!(rig.broker.dead_letters().await.is_empty());
}
