//! The broker goes away under the relay (every connection to it cut, new ones refused) and
//! comes back: every message goes out, each key's in commit order, and the relay resumes by
//! itself.

use std::time::{Duration, Instant};

use super::line::Line;
use crate::brokers::Broker;
use crate::{run_until_stopped, short_tag};

/// A relay publishing through a proxy that cuts every connection to the broker for `away`
/// while messages are enqueued on eight keys: nothing goes out meanwhile and nothing is
/// dead-lettered (an outage is no message's fault), the relay's health shows the outage, and
/// once the broker is reachable again every message reaches it, each key's in commit order,
/// and the relay, which never stopped, drains the table by itself.
pub async fn a_broker_cut_off_and_back_costs_no_message_and_no_order<B: Broker>(
    name: &str,
    away: Duration,
) {
    const KEYS: usize = 8;
    let (broker, proxy, through) = B::open_behind_proxy(&short_tag(name), Duration::from_secs(30))
        .await
        .expect("the story runs on brokers a proxy can cut off");
    let line = Line::<B, sqlx::Postgres>::open_on(broker, name).await;
    let publisher = line.rig.broker.publisher_at(&through).await.unwrap();
    let enqueue = async |from: usize, to: usize| {
        for n in from..to {
            let key = format!("order-{}", n % KEYS);
            line.enqueue(&format!("evt_{n}"), &key, true).await;
        }
    };
    enqueue(0, 80).await;
    let relay = line
        .relay(publisher, Duration::from_secs(30))
        .batch(20)
        .confirm_timeout(Duration::from_secs(3));
    let health = relay.health();
    let (stop, task) = run_until_stopped!(relay);
    line.rig
        .until(
            Duration::from_secs(60),
            "the first part goes out",
            || async { line.pending().await <= 40 },
        )
        .await;

    proxy.cut();
    // Nothing more reaches the part once the cut connections have let go.
    proxy.until_closed(Duration::from_secs(5)).await;
    enqueue(80, 160).await;
    let cut_at = Instant::now();
    let mut seen_down = false;
    while cut_at.elapsed() < away {
        seen_down |= !health.is_ready();
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert!(
        seen_down,
        "{}: the relay's health showed the outage",
        B::LABEL
    );
    assert!(
        line.pending().await >= 80,
        "{}: nothing went out while the broker was away",
        B::LABEL
    );
    assert!(!task.is_finished(), "{}: the relay kept running", B::LABEL);

    proxy.mend();
    enqueue(160, 200).await;
    line.rig
        .until(
            Duration::from_secs(90),
            "everything goes out once the broker is back",
            || async { line.pending().await == 0 },
        )
        .await;
    stop.send(()).unwrap();
    let relayed = task
        .await
        .unwrap()
        .unwrap_or_else(|err| panic!("{}: the relay's run ended in {err}", B::LABEL));
    assert!(health.is_ready(), "{}: ready again", B::LABEL);
    assert_eq!(relayed.dead_lettered, 0, "{relayed:?}");
    assert_eq!(
        line.outbox.dead_count(&line.rig.db.pool).await.unwrap(),
        0,
        "{}: an outage is no message's fault",
        B::LABEL
    );
    let received = line.assert_received_in_key_order(200, KEYS).await;
    eprintln!(
        "{}: {received} messages on the broker for 200, {relayed:?}",
        B::LABEL
    );
}
