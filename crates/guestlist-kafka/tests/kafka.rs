//! The broker suite on Kafka, with PostgreSQL and with SQLite as the store.

mod common;

guestlist_testkit::broker_suite!(kpg, common::Kafka, sqlx::Postgres);
guestlist_testkit::broker_suite!(klite, common::Kafka, sqlx::Sqlite);
guestlist_testkit::keys_suite!(kkeys, common::Kafka, sqlx::Postgres);
guestlist_testkit::dead_letters_suite!(kdead, common::Kafka, sqlx::Postgres);
guestlist_testkit::outage_suite!(kout, common::Kafka);
guestlist_testkit::broker_away_suite!(kaway, common::Kafka);

/// Kafka's own story: a partition revoked while its records are in hand moves only once they are
/// committed, with their offsets, so the new owner starts after them and sees no duplicate.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_rebalance_lets_the_batch_in_hand_finish_before_the_partition_moves() {
    use std::sync::Arc;
    use std::time::Duration;

    use common::Kafka;
    use guestlist_testkit::brokers::Broker;
    use guestlist_testkit::brokers::Rig;
    use guestlist_testkit::run_until_stopped;
    use tokio::sync::Notify;

    // Batches of 10: the first consumer's first batch must not take the whole topic in hand, or
    // nothing is left to move (seen in CI with batches of 100: the second consumer got nothing).
    const EVENTS: i64 = 160;
    const BATCH: usize = 10;
    let rig = Rig::<Kafka, sqlx::Postgres>::open(
        "kreb_a_rebalance_lets_the_batch_in_hand_finish",
        Duration::from_secs(30),
    )
    .await;
    for n in 0..EVENTS {
        // 50 ms of work each: 8 s in all for one consumer, so that the second joins mid-stream
        // even when joining the group takes seconds.
        let event = format!(r#"{{"id":"evt_{n}","slow_ms":50}}"#);
        rig.broker.publish(event.as_bytes()).await;
    }
    let started = Arc::new(Notify::new());
    let (stop_first, first) =
        run_until_stopped!(rig.consumer_signalling(BATCH, started.clone()).await);
    started.notified().await; // the first consumer has records in hand
    let (stop_second, second) = run_until_stopped!(rig.consumer(BATCH).await); // it joins: a rebalance
    rig.until(
        Duration::from_secs(60),
        "every event is handled and the group's offsets are at the end",
        || async { rig.effects().await.1 == EVENTS && rig.broker.drained().await },
    )
    .await;
    stop_first.send(()).unwrap();
    stop_second.send(()).unwrap();
    let (first, second) = (
        first.await.unwrap().unwrap(),
        second.await.unwrap().unwrap(),
    );
    assert_eq!(rig.effects().await, (EVENTS, EVENTS), "one effect each");
    assert!(
        second.fresh > 0,
        "the second consumer took partitions over mid-stream: {second:?}"
    );
    assert_eq!(
        second.duplicates, 0,
        "it started after the records the first had in hand, committed with their offsets \
         before the partitions moved: {second:?} (first: {first:?})"
    );
}

/// What the handler sees of a Kafka record: its headers, its key, its topic, and the record's
/// partition and offset through the delivery.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_handler_sees_headers_key_topic_and_offset() {
    use std::time::Duration;

    use common::Kafka;
    use guestlist_testkit::brokers::Broker;
    use guestlist_testkit::brokers::{Rig, order_paid};

    let rig = Rig::<Kafka, sqlx::Postgres>::open(
        "kseen_the_handler_sees_headers_key_topic_and_offset",
        Duration::from_secs(30),
    )
    .await;
    rig.broker
        .publish_keyed(
            &order_paid("evt_1"),
            "order-42",
            &[("seq", "7"), ("tenant", "acme")],
        )
        .await;
    let (message, details) = guestlist_testkit::brokers::seen::first_handled(&rig, |message| {
        message
            .delivery::<guestlist_kafka::KafkaDelivery>()
            .map(|d| (d.partition(), d.offset()))
    })
    .await;
    assert_eq!(
        message.headers,
        [
            ("seq".to_owned(), "7".to_owned()),
            ("tenant".to_owned(), "acme".to_owned())
        ],
        "every header, in order"
    );
    assert_eq!(message.key.as_deref(), Some("order-42"));
    assert_eq!(message.topic, Some(rig.broker.topic()));
    let (_, offset) = details.expect("the Kafka delivery is reachable");
    assert_eq!(offset, 0, "the first record of its partition");
}

/// Kafka's side of SQS's FIFO story: four records on one key (one partition), the second says
/// "not yet" on its first eight deliveries. Each hand-back rewinds the partition and withdraws
/// the two after it; the source counts only a record's own hand-backs, so the withdrawn ones
/// count nothing and all four are handled, none dead-lettered.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_deferral_does_not_dead_letter_the_records_rewound_behind_it() {
    use std::time::Duration;

    use common::Kafka;
    use guestlist_testkit::brokers::Rig;

    let rig = Rig::<Kafka, sqlx::Postgres>::open(
        "kbehind_a_deferral_does_not_dead_letter_the_records_rewound_behind_it",
        Duration::from_secs(30),
    )
    .await;
    let broker = &rig.broker;
    guestlist_testkit::brokers::suite::a_deferral_does_not_dead_letter_the_messages_behind_it(
        &rig,
        |event| async move { broker.publish_keyed(&event, "order-42", &[]).await },
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn asked_to_stop_during_an_outage_it_returns_and_settles_nothing() {
    guestlist_testkit::brokers::suite::asked_to_stop_during_an_outage_it_returns_and_settles_nothing::<
        common::Kafka,
    >("kstop_asked_to_stop_during_an_outage")
    .await;
}

/// A partition with a long backlog does not starve another: a record that arrives on a second
/// partition while the consumer works through 3,000 records of the first is handled long before
/// the backlog ends. (librdkafka's defaults prefetch up to 100,000 records of a partition ahead
/// of the consumer, and the poll thread's channel held 1,024: the new record waited behind all
/// of them, for minutes where each record takes milliseconds.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_partition_with_a_backlog_does_not_starve_another() {
    use std::time::{Duration, Instant};

    use common::Kafka;
    use guestlist_testkit::brokers::Rig;
    use guestlist_testkit::run_until_stopped;

    const BACKLOG: usize = 3_000;
    let rig = Rig::<Kafka, sqlx::Postgres>::open(
        "kstarve_a_partition_with_a_backlog_does_not_starve_another",
        Duration::from_secs(30),
    )
    .await;
    // Records of 500 bytes, as events with a little body are.
    let pad = "x".repeat(450);
    let backlog: Vec<Vec<u8>> = (0..BACKLOG)
        .map(|n| format!(r#"{{"id":"evt_a{n}","slow_ms":2,"pad":"{pad}"}}"#).into_bytes())
        .collect();
    rig.broker.publish_to(0, &backlog).await;
    let (stop, consumer) = run_until_stopped!(rig.consumer(10).await);
    let handled = |event: &'static str| {
        let db = &rig.db;
        let effects = rig.effects.clone();
        async move {
            db.scalar(format!(
                "SELECT count(*) FROM {effects} WHERE event LIKE '{event}'"
            ))
            .await
        }
    };
    let deadline = Instant::now() + Duration::from_secs(60);
    while handled("evt_a%").await < 100 {
        assert!(Instant::now() < deadline, "the backlog is being handled");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    rig.broker
        .publish_to(1, &[br#"{"id":"evt_b0"}"#.to_vec()])
        .await;
    while handled("evt_b0").await == 0 {
        assert!(
            Instant::now() < deadline,
            "the other partition's record is handled"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let before = handled("evt_a%").await;
    stop.send(()).unwrap();
    consumer.await.unwrap().unwrap();
    assert!(
        before < (BACKLOG / 2) as i64,
        "the record on the second partition waited behind {before} of the {BACKLOG} records \
         of the first"
    );
}
