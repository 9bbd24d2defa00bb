//! Messages flowing: each event has one effect, poison is dead-lettered while the rest flow,
//! headers reach the handler, a handled message past the delivery limit is a duplicate.

use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use guestlist_core::{Claim, HandlerName, MessageId};

use crate::Fixture;

use crate::brokers::Broker;
use crate::brokers::rig::{Rig, order_paid};
use crate::run_until_stopped;

/// Five publishes of one event: five acknowledgements, one pick task.
pub async fn five_publishes_five_acks_one_pick_task<B: Broker, DB: Fixture>(name: &str) {
    crate::metrics::recorder();
    let rig = Rig::<B, DB>::open(name, Duration::from_secs(30)).await;
    for _ in 0..5 {
        rig.broker.publish(&order_paid("evt_9f3k")).await;
    }
    let (stop, task) = run_until_stopped!(rig.consumer(1).await);
    let handled = rig.stop_drained(stop, task, Duration::from_secs(30)).await;
    assert_eq!(handled.delivered, 5);
    assert_eq!(handled.fresh + handled.duplicates, 5, "five acks");
    assert_eq!(rig.effects().await, (1, 1), "one pick task");
    assert!(rig.broker.drained().await, "nothing left unacknowledged");
    let carried = rig
        .db
        .scalar(format!(
            "SELECT count(*) FROM {} WHERE carried = 'warehouse:evt_9f3k/charge'",
            rig.effects
        ))
        .await;
    assert_eq!(
        carried, 1,
        "the handler had its message's key to carry downstream"
    );
    // Counted as it happened: five delivered, one fresh, four duplicates, nothing failed.
    let counted = crate::metrics::counters();
    let messages = |outcome| {
        crate::metrics::sum(
            &counted,
            "guestlist_consumer_messages_total",
            &[("handler", "warehouse"), ("outcome", outcome)],
        )
    };
    assert_eq!(
        ["delivered", "fresh", "duplicate", "failed", "dead_lettered"].map(messages),
        [5, 1, 4, 0, 0],
        "guestlist_consumer_messages_total by outcome"
    );
}

/// A poison message is dead-lettered after its deliveries while the good ones behind it flow.
pub async fn a_poison_message_is_dead_lettered_while_the_rest_flow<B: Broker, DB: Fixture>(
    name: &str,
) {
    let rig = Rig::<B, DB>::open(name, Duration::from_secs(30)).await;
    rig.broker
        .publish(br#"{"id":"evt_poison","kind":"poison"}"#)
        .await;
    for n in 0..10 {
        rig.broker.publish(&order_paid(&format!("evt_{n}"))).await;
    }
    let (stop, task) = run_until_stopped!(rig.consumer(10).await.max_deliveries(3));
    rig.until(
        Duration::from_secs(30),
        "the poison is dead-lettered and the rest handled",
        || async { rig.broker.dead_letters().await.len() == 1 && rig.effects().await == (10, 10) },
    )
    .await;
    let handled = rig.stop_drained(stop, task, Duration::from_secs(10)).await;
    assert_eq!(handled.dead_lettered, 1);
    assert_eq!(handled.failed, 3, "three deliveries failed before it went");
    let errors = rig.broker.dead_letters().await;
    assert!(
        errors[0].contains("poison pill"),
        "the dead letter says why: {errors:?}"
    );
    // And the inbox recorded it, for operators (guestlist console, guestlist history).
    let recorded = rig.inbox.dead_letters(&rig.db.pool, 10).await.unwrap();
    assert_eq!(recorded.len(), 1, "{recorded:?}");
    assert_eq!(recorded[0].message_id, "evt_poison");
    assert!(recorded[0].reason.contains("poison pill"), "{recorded:?}");
    assert!(recorded[0].deliveries >= 3, "{recorded:?}");
}

/// A message's headers reach its handler and stay on its dead letter, beside the error.
pub async fn a_messages_headers_reach_its_handler_and_stay_on_its_dead_letter<
    B: Broker,
    DB: Fixture,
>(
    name: &str,
) {
    use crate::brokers::header_of;
    // Lower case, and a name every broker takes (SQS attribute names: letters, digits, -, _, .).
    const SEQ: &str = "x-order-seq";
    let rig = Rig::<B, DB>::open(name, Duration::from_secs(30)).await;
    rig.broker
        .publish_with(&order_paid("evt_1"), &[(SEQ, "7"), ("x-tenant", "acme")])
        .await;
    rig.broker
        .publish_with(
            br#"{"id":"evt_poison","kind":"poison"}"#,
            &[(SEQ, "8"), ("x-tenant", "acme")],
        )
        .await;
    let (stop, task) = run_until_stopped!(rig.consumer(10).await.max_deliveries(2));
    rig.until(
        Duration::from_secs(30),
        "the event is handled and the poison dead-lettered",
        || async { rig.effects().await == (1, 1) && rig.broker.dead_letters().await.len() == 1 },
    )
    .await;
    stop.send(()).unwrap();
    task.await.unwrap().unwrap();

    let seen = rig.headers_seen.lock().unwrap().clone();
    for (id, seq) in [("evt_1", "7"), ("evt_poison", "8")] {
        let headers = &seen[id];
        assert_eq!(
            header_of(headers, SEQ).as_deref(),
            Some(seq),
            "{}: the handler saw {id}'s headers: {headers:?}",
            B::LABEL
        );
        assert_eq!(header_of(headers, "x-tenant").as_deref(), Some("acme"));
    }
    let dead = rig.broker.dead_letter_headers().await;
    assert_eq!(dead.len(), 1);
    assert_eq!(
        header_of(&dead[0], SEQ).as_deref(),
        Some("8"),
        "{}: the dead letter keeps the message's own headers beside its error: {:?}",
        B::LABEL,
        dead[0]
    );
    assert_eq!(header_of(&dead[0], "x-tenant").as_deref(), Some("acme"));
    assert!(
        header_of(&dead[0], B::ERROR_HEADER).is_some_and(|error| error.contains("poison pill")),
        "{:?}",
        dead[0]
    );
}

/// A message already handled, delivered again past the delivery limit, is a duplicate, not poison.
pub async fn a_handled_message_delivered_past_the_limit_is_a_duplicate_not_poison<
    B: Broker,
    DB: Fixture,
>(
    name: &str,
) {
    use guestlist_consumer::{Delivery, Source};
    // An ack wait of a second, where the broker has one: a delivery handed back comes round
    // again within it.
    let rig = Rig::<B, DB>::open(name, Duration::from_secs(1)).await;
    rig.broker.publish(&order_paid("evt_done")).await;
    let (stop, task) = run_until_stopped!(rig.consumer(10).await);
    rig.until(Duration::from_secs(30), "the event is handled", || async {
        rig.effects().await == (1, 1) && rig.broker.drained().await
    })
    .await;
    stop.send(()).unwrap();
    task.await.unwrap().unwrap();

    // A copy (a second publisher, a second warehouse's redeliveries) that went round four
    // times unhandled, as copies do while their first is deferred: past the limit of 2.
    rig.broker.publish(&order_paid("evt_done")).await;
    let mut source = rig.broker.source().await;
    let mut handed_back = 0;
    let deadline = Instant::now() + Duration::from_secs(30);
    while handed_back < 4 {
        assert!(
            Instant::now() < deadline,
            "the copy came back {handed_back} times"
        );
        for delivery in source.fetch(1).await.unwrap() {
            delivery.nak(Duration::from_millis(20)).await.unwrap();
            handed_back += 1;
        }
    }
    drop(source);

    let (stop, task) = run_until_stopped!(rig.consumer(10).await.max_deliveries(2));
    rig.until(Duration::from_secs(30), "the copy is settled", || async {
        rig.broker.drained().await
    })
    .await;
    stop.send(()).unwrap();
    let handled = task.await.unwrap().unwrap();
    assert_eq!(handled.dead_lettered, 0, "a handled event is never poison");
    assert_eq!(
        handled.duplicates, 1,
        "the copy is acknowledged as a duplicate"
    );
    assert!(rig.broker.dead_letters().await.is_empty());
    assert_eq!(rig.effects().await, (1, 1), "one effect");
}

/// A poison message inside a batch runs once per delivery, and each run is counted as a failure.
pub async fn a_poison_in_a_batch_runs_once_per_delivery_and_each_run_is_counted<
    B: Broker,
    DB: Fixture,
>(
    name: &str,
) {
    let rig = Rig::<B, DB>::open(name, Duration::from_secs(30)).await;
    for n in 0..4 {
        rig.broker.publish(&order_paid(&format!("evt_{n}"))).await;
    }
    rig.broker
        .publish(br#"{"id":"evt_poison","kind":"poison"}"#)
        .await;
    for n in 4..8 {
        rig.broker.publish(&order_paid(&format!("evt_{n}"))).await;
    }
    let (stop, task) = run_until_stopped!(rig.consumer(10).await.max_deliveries(3));
    rig.until(
        Duration::from_secs(60),
        "the poison is dead-lettered and the rest handled",
        || async {
            rig.broker.dead_letters().await.len() == 1
                && rig.effects().await == (8, 8)
                && rig.broker.drained().await
        },
    )
    .await;
    stop.send(()).unwrap();
    let handled = task.await.unwrap().unwrap();
    let runs = rig.poison_runs.load(Ordering::SeqCst);
    assert_eq!(
        (runs, handled.failed, handled.dead_lettered),
        (3, 3, 1),
        "{}: the poison ran once per delivery, each failed run counted: {handled:?}",
        B::LABEL
    );
}

/// A batch the consumer handles ends as the inbox's own batch path ([`Inbox::process_batch`])
/// ends on the same ids: the same ids run (an id twice in the batch once, an id handled before
/// not at all) and the same rows are on the guest list. The consumer claims, runs and commits a
/// batch itself (`guestlist-consumer`'s `batch.rs` says why), so this story is what catches the
/// two paths drifting apart.
///
/// [`Inbox::process_batch`]: guestlist_sqlx::Inbox::process_batch
pub async fn a_batch_ends_as_the_inboxs_own_batch_path_ends<B: Broker, DB: Fixture>(name: &str) {
    let rig = Rig::<B, DB>::open(name, Duration::from_secs(30)).await;
    let pool = &rig.db.pool;
    let warehouse = HandlerName::new("warehouse").unwrap();
    let by_inbox = HandlerName::new("warehouse_by_inbox").unwrap();
    let handled_before = MessageId::new("evt_2").unwrap();
    for handler in [&warehouse, &by_inbox] {
        let mut tx = rig.inbox.begin(pool).await.unwrap();
        let claim = rig.inbox.claim(&mut tx, handler, &handled_before).await;
        assert_eq!(claim.unwrap(), Claim::Fresh);
        tx.commit().await.unwrap();
    }
    let published = ["evt_0", "evt_1", "evt_1", "evt_2", "evt_3"];
    for id in published {
        rig.broker.publish(&order_paid(id)).await;
    }
    let (stop, task) = run_until_stopped!(rig.consumer(10).await);
    let handled = rig.stop_drained(stop, task, Duration::from_secs(30)).await;
    assert_eq!(handled.delivered, 5, "{}: {handled:?}", B::LABEL);

    let ids: Vec<MessageId> = published.map(|id| MessageId::new(id).unwrap()).to_vec();
    let done = rig
        .inbox
        .process_batch(pool, &by_inbox, &ids, async |_tx, fresh: &[MessageId]| {
            Ok::<_, anyhow::Error>(fresh.len())
        })
        .await
        .unwrap();
    assert_eq!(done.duplicates, [handled_before], "{}", B::LABEL);
    assert_eq!(handled.fresh, done.fresh.len() as u64, "{}", B::LABEL);
    for id in ["evt_0", "evt_1", "evt_2", "evt_3"] {
        let ran = |table: &str| format!("SELECT count(*) FROM {table} WHERE event = '{id}'");
        let by_consumer = rig.db.scalar(ran(&rig.effects)).await;
        let ran_by_inbox = done.fresh.iter().any(|fresh| fresh.as_str() == id);
        assert_eq!(
            by_consumer,
            i64::from(ran_by_inbox),
            "{}: {id} ran {by_consumer} times under the consumer; Inbox::process_batch ran it: {ran_by_inbox}",
            B::LABEL
        );
        for handler in [&warehouse, &by_inbox] {
            let listed = format!(
                "SELECT count(*) FROM {} WHERE handler = '{handler}' AND message_id = '{id}'",
                rig.inbox.table()
            );
            assert_eq!(
                rig.db.scalar(listed).await,
                1,
                "{}: {id} on {handler}'s guest list",
                B::LABEL
            );
        }
    }
}
