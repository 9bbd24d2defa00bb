//! Incoming dead letters put back: a group of them retried once their bug is fixed, each
//! handled once by its own handler, whatever else reads the same subject, however often the
//! retry is repeated.

use std::sync::atomic::Ordering;
use std::time::Duration;

use guestlist_core::{RETRY_FOR_HEADER, RETRY_OF_HEADER};
use guestlist_sqlx::{DeadGroup, DeadRetry, DeadState};

use crate::Fixture;
use crate::brokers::{Broker, Rig, order_paid};
use crate::run_until_stopped;

/// Three messages fail past the limit and are dead-lettered (with their copies) while five
/// flow; their bug is fixed and their group retried: each is handled once, under its own id,
/// with its headers. A retry repeated (its retrier died before recording it) and a second
/// retry change nothing; a retry addressed to another handler is acknowledged unrun.
pub async fn a_group_of_dead_letters_retried_is_handled_once_each<B: Broker, DB: Fixture>(
    name: &str,
) {
    let rig = Rig::<B, DB>::open(name, Duration::from_secs(30)).await;
    for n in 0..5 {
        rig.broker.publish(&order_paid(&format!("evt_{n}"))).await;
    }
    let (stop, task) = dead_lettered(&rig, "evt_p", 3).await;
    rig.until(Duration::from_secs(60), "five events handled", || async {
        rig.effects().await == (5, 5)
    })
    .await;
    let recorded = async || rig.inbox.dead_count(&rig.db.pool).await.unwrap();
    let groups = rig.inbox.dead_groups(&rig.db.pool, 100).await.unwrap();
    assert_eq!(groups.len(), 1, "one failure, one group: {groups:?}");
    let group: &DeadGroup = &groups[0];
    assert_eq!((group.handler.as_str(), group.count()), ("warehouse", 3));
    let letter = rig
        .inbox
        .dead_letter(&rig.db.pool, "warehouse", "evt_p0")
        .await
        .unwrap()
        .unwrap();
    assert_eq!(
        letter.body.as_deref(),
        Some(&br#"{"id":"evt_p0","kind":"poison","curable":true}"#[..])
    );
    assert!(
        letter.topic.is_some(),
        "it knows where it goes back: {letter:?}"
    );

    // The bug is fixed; the group goes back.
    rig.cured.store(true, Ordering::SeqCst);
    let publisher = rig.broker.publisher().await;
    for id in &group.message_ids {
        let retried = rig
            .inbox
            .retry_dead(&rig.db.pool, &publisher, "warehouse", id, "operator-1")
            .await
            .unwrap();
        assert_eq!(retried, DeadRetry::Retried { retry: 1 }, "{id}");
    }
    // Another handler's retry on the same queue: not this handler's to run.
    rig.broker
        .publish_with(
            &order_paid("evt_billing"),
            &[
                (RETRY_FOR_HEADER, "billing"),
                (RETRY_OF_HEADER, "evt_billing"),
            ],
        )
        .await;
    rig.until(
        Duration::from_secs(60),
        "the three retried are handled",
        || async { rig.effects().await == (8, 8) },
    )
    .await;

    // Once retried, a retry is refused; a retry left mid-way is finished, and runs nothing.
    let again = rig
        .inbox
        .retry_dead(
            &rig.db.pool,
            &publisher,
            "warehouse",
            "evt_p0",
            "operator-2",
        )
        .await
        .unwrap();
    assert_eq!(again, DeadRetry::AlreadyRetried);
    rig.db
        .exec(format!(
            "UPDATE {}_dead SET state = 'retrying' WHERE message_id = 'evt_p1'",
            rig.inbox.table()
        ))
        .await;
    let resumed = rig
        .inbox
        .retry_dead(
            &rig.db.pool,
            &publisher,
            "warehouse",
            "evt_p1",
            "operator-2",
        )
        .await
        .unwrap();
    assert_eq!(
        resumed,
        DeadRetry::Retried { retry: 1 },
        "the same retry, again"
    );
    let missing = rig
        .inbox
        .retry_dead(
            &rig.db.pool,
            &publisher,
            "warehouse",
            "evt_none",
            "operator-2",
        )
        .await
        .unwrap();
    assert_eq!(missing, DeadRetry::NotFound);

    let handled = rig.stop_drained(stop, task, Duration::from_secs(30)).await;
    assert_eq!(rig.effects().await, (8, 8), "each retried message ran once");
    assert_eq!(handled.for_other_handlers, 1, "{handled:?}");
    let letters = rig.inbox.dead_letters(&rig.db.pool, 10).await.unwrap();
    assert!(
        letters
            .iter()
            .all(|l| l.state == DeadState::Retried && l.retries == 1),
        "every letter retried once, none dead: {letters:?}"
    );
    assert_eq!(
        letters[0]
            .retried_by
            .as_deref()
            .map(|by| by.starts_with("operator-")),
        Some(true)
    );
    assert_eq!(recorded().await, 0, "no dead letter left");
    // The handler saw each retried message with its own headers.
    let seen = rig
        .headers_seen
        .lock()
        .unwrap()
        .get("evt_p2")
        .cloned()
        .unwrap_or_default();
    assert!(
        seen.iter().any(|(n, v)| n == "x-tenant" && v == "acme"),
        "the retry kept the message's headers: {seen:?}"
    );
}

/// Publishes `n` curable poison events `<prefix>0`, `<prefix>1`, … (with the header
/// `x-tenant: acme`), starts a consumer that dead-letters at the second delivery, and waits
/// until the inbox has recorded the `n` of them; returns the running consumer.
pub(crate) async fn dead_lettered<B: Broker, DB: Fixture>(
    rig: &Rig<B, DB>,
    prefix: &str,
    n: usize,
) -> (
    tokio::sync::oneshot::Sender<()>,
    tokio::task::JoinHandle<Result<guestlist_consumer::Handled, guestlist_consumer::Error>>,
) {
    for k in 0..n {
        let poison = format!(r#"{{"id":"{prefix}{k}","kind":"poison","curable":true}}"#);
        rig.broker
            .publish_with(poison.as_bytes(), &[("x-tenant", "acme")])
            .await;
    }
    let running = run_until_stopped!(rig.consumer(10).await.max_deliveries(2));
    rig.until(
        Duration::from_secs(60),
        "the poison events are dead-lettered and recorded",
        || async { rig.inbox.dead_count(&rig.db.pool).await.unwrap() == n as u64 },
    )
    .await;
    running
}

/// Runs of the pick handler that wrote an effect for `event`.
pub(crate) async fn effects_of<B: Broker, DB: Fixture>(rig: &Rig<B, DB>, event: &str) -> i64 {
    // The stories' ids are letters, digits and underscores.
    rig.db
        .scalar(format!(
            "SELECT count(*) FROM {} WHERE event = '{event}'",
            rig.effects
        ))
        .await
}
