//! The broker goes away while events flow (every connection to it cut, new ones refused) and
//! comes back: the consumer resumes by itself, and every event has one effect.

use std::time::Duration;

use crate::brokers::Broker;
use crate::brokers::rig::{Rig, order_paid};
use crate::{run_until_stopped, short_tag};

/// A consumer reaching the broker through a proxy that cuts every connection for `away` while
/// events go on being published (straight to the broker; on Kafka, through the proxy too: the
/// test's producer holds them until the broker is back): nothing is handled meanwhile, the
/// consumer keeps trying, and once the broker is reachable again every event, those before,
/// during and after, has one effect, nothing failed or dead-lettered, and the consumer never
/// stopped.
pub async fn the_broker_cut_off_and_back_costs_no_event<B: Broker>(name: &str, away: Duration) {
    let (broker, proxy, through) = B::open_behind_proxy(&short_tag(name), Duration::from_secs(5))
        .await
        .expect("the story runs on brokers a proxy can cut off");
    let rig = Rig::<B, sqlx::Postgres>::open_on(broker, name).await;
    let source = rig.broker.source_at(&through).await.unwrap();
    let consumer = rig.consumer_of(source, 10).max_deliveries(3);
    let (stop, task) = run_until_stopped!(consumer);
    for n in 0..20 {
        rig.broker.publish(&order_paid(&format!("evt_{n}"))).await;
    }
    rig.until(
        Duration::from_secs(60),
        "the first events are handled",
        || async { rig.effects().await.1 == 20 },
    )
    .await;

    proxy.cut();
    // Nothing more reaches the part once the cut connections have let go.
    proxy.until_closed(Duration::from_secs(5)).await;
    let published_meanwhile = async {
        for n in 20..60 {
            rig.broker.publish(&order_paid(&format!("evt_{n}"))).await;
        }
    };
    let away_and_back = async {
        tokio::time::sleep(away).await;
        assert_eq!(
            rig.effects().await,
            (20, 20),
            "{}: nothing reached the consumer while the broker was away",
            B::LABEL
        );
        assert!(
            proxy.refused() > 0,
            "{}: the consumer tried to reach the broker meanwhile",
            B::LABEL
        );
        assert!(
            !task.is_finished(),
            "{}: the consumer kept running",
            B::LABEL
        );
        proxy.mend();
    };
    tokio::join!(published_meanwhile, away_and_back);
    for n in 60..80 {
        rig.broker.publish(&order_paid(&format!("evt_{n}"))).await;
    }
    rig.until(
        Duration::from_secs(90),
        "every event is handled once the broker is back",
        || async { rig.effects().await.1 == 80 && rig.broker.drained().await },
    )
    .await;
    stop.send(()).unwrap();
    let handled = task.await.unwrap().unwrap();
    assert_eq!(
        rig.effects().await,
        (80, 80),
        "{}: one effect each",
        B::LABEL
    );
    assert_eq!(
        (handled.failed, handled.dead_lettered),
        (0, 0),
        "{}: nothing failed or was dead-lettered",
        B::LABEL
    );
    assert!(rig.broker.dead_letters().await.is_empty());
}
