//! The broker suite on Amazon SQS (moto), with PostgreSQL and with SQLite as the store, and
//! SQS's own stories: FIFO order through a failure, a queue's own redrive policy, SNS envelopes,
//! and the ids SQS gives a resent message. Module names start with two letters no other test
//! module of the broker suites uses: they name queues and tables.

mod common;

guestlist_testkit::broker_suite!(spg, common::Sqs, sqlx::Postgres);
guestlist_testkit::broker_suite!(slite, common::Sqs, sqlx::Sqlite);
guestlist_testkit::keys_suite!(skeys, common::SqsFifo, sqlx::Postgres);
guestlist_testkit::dead_letters_suite!(sdead, common::Sqs, sqlx::Postgres);
guestlist_testkit::outage_suite!(sout, common::Sqs);
guestlist_testkit::broker_away_suite!(saway, common::Sqs);

use std::time::Duration;

use common::{Sqs, SqsFifo};
use guestlist_consumer::IdFrom;
use guestlist_testkit::brokers::Broker;
use guestlist_testkit::brokers::{Rig, order_paid};
use guestlist_testkit::run_until_stopped;

/// On a FIFO queue a message handed back takes the later messages of its group in the batch
/// with it: the group is handled in its order, the other group flows.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_fifo_groups_order_holds_through_a_deferral() {
    let name = "sfifo_a_fifo_groups_order_holds_through_a_deferral";
    let rig = Rig::<SqsFifo, sqlx::Postgres>::open(name, Duration::from_secs(30)).await;
    // The order the effects committed in.
    rig.db
        .exec(format!(
            "ALTER TABLE {} ADD COLUMN n BIGSERIAL",
            rig.effects
        ))
        .await;
    for n in 1..=5 {
        for group in ["a", "b"] {
            // a2 says "not yet" on its first delivery: back it goes, a3 to a5 with it.
            let not_yet = if (group, n) == ("a", 2) {
                r#","not_yet_until":1"#
            } else {
                ""
            };
            let event = format!(r#"{{"id":"evt_{group}{n}"{not_yet}}}"#);
            rig.broker.send_to_group(event.as_bytes(), &[], group).await;
        }
    }
    let (stop, task) = run_until_stopped!(rig.consumer(10).await);
    rig.until(
        Duration::from_secs(30),
        "every event is handled and deleted",
        || async { rig.effects().await.1 == 10 && rig.broker.drained().await },
    )
    .await;
    stop.send(()).unwrap();
    let handled = task.await.unwrap().unwrap();
    assert!(handled.deferred >= 1, "a2 was deferred: {handled:?}");
    assert_eq!(rig.effects().await, (10, 10), "one effect each");
    let committed: Vec<String> = sqlx::query_scalar(sqlx::AssertSqlSafe(format!(
        "SELECT event FROM {} ORDER BY n",
        rig.effects
    )))
    .fetch_all(&rig.db.pool)
    .await
    .unwrap();
    for group in ["a", "b"] {
        let prefix = format!("evt_{group}");
        let order: Vec<&str> = committed
            .iter()
            .map(String::as_str)
            .filter(|event| event.starts_with(&prefix))
            .collect();
        let expected: Vec<String> = (1..=5).map(|n| format!("{prefix}{n}")).collect();
        assert_eq!(order, expected, "group {group} in its order: {committed:?}");
    }
}

/// A queue with a redrive policy of its own: the consumer dead-letters at the policy's
/// maxReceiveCount (not its own default of 5) by making the message visible, and SQS moves it
/// to the policy's dead-letter queue on the next receive, while the rest flow.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_queues_own_redrive_policy_takes_the_poison() {
    let name = "sredrive_a_queues_own_redrive_policy_takes_the_poison";
    let broker = Sqs::open_redriven(&guestlist_testkit::short_tag(name), 3).await;
    let rig = Rig::<Sqs, sqlx::Postgres>::open_on(broker, name).await;
    rig.broker
        .publish(br#"{"id":"evt_poison","kind":"poison"}"#)
        .await;
    for n in 0..10 {
        rig.broker.publish(&order_paid(&format!("evt_{n}"))).await;
    }
    let (stop, task) = run_until_stopped!(rig.consumer(10).await);
    rig.until(
        Duration::from_secs(30),
        "the rest are handled and SQS moved the poison to the dead-letter queue",
        || async {
            rig.effects().await.1 == 10
                && rig.broker.drained().await
                && rig.broker.dead_letters().await.len() == 1
        },
    )
    .await;
    stop.send(()).unwrap();
    let handled = task.await.unwrap().unwrap();
    assert_eq!(
        (handled.failed, handled.dead_lettered),
        (3, 1),
        "dead-lettered at the policy's count of 3: {handled:?}"
    );
    assert_eq!(rig.effects().await, (10, 10));
}

/// A queue subscribed to an SNS topic receives each notification in SNS's envelope, and SNS may
/// deliver one publish twice: two SQS messages, one SNS `MessageId`, one effect.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_copies_of_one_sns_notification_have_one_effect() {
    let name = "ssns_two_copies_of_one_sns_notification_have_one_effect";
    let rig = Rig::<Sqs, sqlx::Postgres>::open(name, Duration::from_secs(30)).await;
    let envelope = |sns_id: &str| {
        serde_json::json!({
            "Type": "Notification",
            "MessageId": sns_id,
            "TopicArn": "arn:aws:sns:us-east-1:123456789012:orders",
            "Message": String::from_utf8(order_paid("evt_1")).unwrap(),
            "Timestamp": "2026-12-01T00:00:00.000Z",
        })
        .to_string()
    };
    for sns_id in ["evt_sns_1", "evt_sns_1", "evt_sns_2"] {
        rig.broker.publish(envelope(sns_id).as_bytes()).await;
    }
    let source = rig.broker.source_with(|b| b.sns_envelopes()).await;
    let (stop, task) = run_until_stopped!(rig.consumer_by(source, 10, IdFrom::BrokerId));
    rig.until(
        Duration::from_secs(30),
        "every copy is handled and deleted",
        || async { rig.effects().await.1 == 2 && rig.broker.drained().await },
    )
    .await;
    stop.send(()).unwrap();
    let handled = task.await.unwrap().unwrap();
    assert_eq!(
        (handled.fresh, handled.duplicates),
        (2, 1),
        "the second copy of evt_sns_1 is a duplicate: {handled:?}"
    );
    assert_eq!(rig.effects().await, (2, 2));
}

/// A message sent again gets a new SQS `MessageId`: a producer that resends keeps the event's
/// id in an attribute, and the source reads the broker id there.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_resent_message_is_known_by_its_id_attribute() {
    let name = "sattr_a_resent_message_is_known_by_its_id_attribute";
    let rig = Rig::<Sqs, sqlx::Postgres>::open(name, Duration::from_secs(30)).await;
    for _ in 0..3 {
        rig.broker
            .send(&order_paid("evt_7"), &[("event-id", "evt_7")])
            .await;
    }
    let source = rig
        .broker
        .source_with(|b| b.broker_id_attribute("event-id"))
        .await;
    let (stop, task) = run_until_stopped!(rig.consumer_by(source, 10, IdFrom::BrokerId));
    rig.until(
        Duration::from_secs(30),
        "every copy is handled and deleted",
        || async { rig.effects().await.1 == 1 && rig.broker.drained().await },
    )
    .await;
    stop.send(()).unwrap();
    let handled = task.await.unwrap().unwrap();
    assert_eq!((handled.fresh, handled.duplicates), (1, 2), "{handled:?}");
    assert_eq!(rig.effects().await, (1, 1));
}

/// A queue without a redrive policy needs a dead-letter queue named, and the error says so.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_queue_with_nowhere_for_poison_is_refused() {
    let broker = Sqs::open("snodlq_a_qu_wi_no", Duration::from_secs(30)).await;
    let error = guestlist_sqs::SqsSource::builder(&broker.topic())
        .client(broker.client())
        .connect()
        .await
        .unwrap_err()
        .to_string();
    assert!(
        error.contains("no redrive policy") && error.contains("SqsSourceBuilder::dead_letter"),
        "{error}"
    );
}

/// A handler that outlives the visibility timeout, with a second consumer polling the queue:
/// the heartbeats keep the message invisible, so it is delivered once, not to both.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_long_handler_is_delivered_once_while_another_consumer_polls() {
    let name = "sbeat_a_long_handler_is_delivered_once_while_another_consumer_polls";
    let visibility = Duration::from_secs(1);
    let rig = Rig::<Sqs, sqlx::Postgres>::open(name, visibility).await;
    rig.broker
        .publish(br#"{"id":"evt_slow","slow_ms":3000}"#)
        .await;
    let (stop_first, first) = run_until_stopped!(rig.consumer(1).await);
    let (stop_second, second) = run_until_stopped!(rig.consumer(1).await);
    rig.until(
        Duration::from_secs(20),
        "the slow event is handled and deleted",
        || async { rig.effects().await.0 == 1 && rig.broker.drained().await },
    )
    .await;
    tokio::time::sleep(visibility * 2).await; // a second delivery would show by now
    stop_first.send(()).unwrap();
    stop_second.send(()).unwrap();
    let (first, second) = (
        first.await.unwrap().unwrap(),
        second.await.unwrap().unwrap(),
    );
    assert_eq!(
        first.delivered + second.delivered,
        1,
        "received once in three visibility timeouts: {first:?} {second:?}"
    );
    assert_eq!(rig.effects().await, (1, 1));
}

/// On a FIFO queue, A-1 of the group A-0..A-3 says "not yet" on its first eight deliveries
/// (through `guestlist_carry::defer`). Each hand-back takes A-2 and A-3 back with it, and SQS
/// counts those receives in their `ApproximateReceiveCount`; withdrawn because of another
/// message, they count nothing against themselves: all four are handled, none dead-lettered.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_deferral_does_not_dead_letter_its_fifo_followers() {
    let name = "sfollow_a_deferral_does_not_dead_letter_its_fifo_followers";
    let rig = Rig::<SqsFifo, sqlx::Postgres>::open(name, Duration::from_secs(30)).await;
    let broker = &rig.broker;
    guestlist_testkit::brokers::suite::a_deferral_does_not_dead_letter_the_messages_behind_it(
        &rig,
        |event| async move { broker.send_to_group(&event, &[], "a").await },
    )
    .await;
    let a3: i64 = rig
        .db
        .scalar(format!(
            "SELECT CAST(delivery AS BIGINT) FROM {} WHERE event = 'evt_a3'",
            rig.effects
        ))
        .await;
    assert!(
        a3 > 5,
        "A-3 came back past the limit of 5 deliveries and was handled all the same ({a3})"
    );
}

/// What the handler sees of an SQS FIFO message: its attributes as headers, its group as the
/// key, and SQS's own details through the delivery.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_handler_sees_attributes_and_group() {
    let name = "sseen_the_handler_sees_attributes_and_group";
    let rig = Rig::<SqsFifo, sqlx::Postgres>::open(name, Duration::from_secs(30)).await;
    rig.broker
        .send_to_group(
            &order_paid("evt_1"),
            &[("seq", "7"), ("tenant", "acme")],
            "order-42",
        )
        .await;
    let (message, details) = guestlist_testkit::brokers::seen::first_handled(&rig, |message| {
        message
            .delivery::<guestlist_sqs::SqsDelivery>()
            .map(|d| (d.group().unwrap_or_default().to_owned(), d.receive_count()))
    })
    .await;
    assert_eq!(message.header("seq"), Some("7"));
    assert_eq!(message.header("tenant"), Some("acme"));
    assert_eq!(
        message.key.as_deref(),
        Some("order-42"),
        "the group is the key"
    );
    assert_eq!(
        details,
        Some(("order-42".to_owned(), 1)),
        "SQS's own details"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn asked_to_stop_during_an_outage_it_returns_and_settles_nothing() {
    guestlist_testkit::brokers::suite::asked_to_stop_during_an_outage_it_returns_and_settles_nothing::<Sqs>(
        "sstop_asked_to_stop_during_an_outage",
    )
    .await;
}
