//! The outbox relay to Kafka, from PostgreSQL, SQLite and MariaDB/MySQL. Module names start
//! with two letters no other broker suite's test module uses: they name topics and tables.

mod common;

guestlist_testkit::relay_suite!(xpg, common::Kafka, sqlx::Postgres);
guestlist_testkit::relay_suite!(xlite, common::Kafka, sqlx::Sqlite);
guestlist_testkit::relay_suite!(xmy, common::Kafka, sqlx::MySql);
guestlist_testkit::relay_wire_suite!(xwire, common::Kafka);
guestlist_testkit::relay_shares_suite!(xshpg, common::Kafka, sqlx::Postgres);

/// Kafka's own story, met in the soak: records that time out while the broker stalls make
/// librdkafka bump its idempotent producer's epoch; tansu takes no new epoch from a producer
/// without a transactional id and answers `ProducerFenced` to every record after it, which
/// librdkafka never counts as fatal. The relay's publisher replaces such a producer: after the
/// round the fence fails, the next publishes.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_producer_fenced_after_a_stall_is_replaced_and_the_next_round_publishes() {
    use std::time::Duration;

    use common::Kafka;
    use guestlist_core::{OutboxMessage, Outcomes, Publish};
    use guestlist_testkit::brokers::Broker;

    let Some((kafka, proxy, through)) =
        Kafka::open_behind_proxy("xfence_a_producer_fenced_after_a_stall", Duration::ZERO).await
    else {
        unreachable!("Kafka runs behind a proxy");
    };
    // Records time out after two seconds of a stall, not the relay's default thirty.
    let publisher = guestlist_kafka::KafkaPublisher::builder(&through)
        .option("message.timeout.ms", "2000")
        .connect()
        .await
        .expect("a publisher");
    let topic = kafka.topic();
    let publish = |id: &'static str| {
        let (publisher, topic) = (publisher.clone(), topic.clone());
        async move {
            let mut outcomes = Outcomes::with_capacity(1);
            let message = OutboxMessage::new(id, &topic, id.as_bytes().to_vec());
            publisher
                .publish(std::slice::from_ref(&message), &mut outcomes)
                .await;
            outcomes.into_results(1).remove(0).map(drop)
        }
    };
    publish("before").await.expect("published before the stall");

    proxy.stall();
    let stalled = publish("stalled").await;
    assert!(stalled.is_err(), "the stall times the record out");
    proxy.release();

    // The first round after the stall may meet the fence; the one after it publishes. Without
    // the renewal every round fails with the fence.
    let mut rounds = Vec::new();
    for _ in 0..4 {
        let round = publish("after").await;
        let published = round.is_ok();
        rounds.push(round.map_err(|err| err.to_string()));
        if published {
            break;
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    assert!(
        rounds.len() <= 2 && rounds.last().is_some_and(Result::is_ok),
        "the round after the fence publishes: {rounds:?}"
    );
    publish("later")
        .await
        .expect("and so does every round after it");
    let ids: Vec<String> = kafka.received().await.into_iter().map(|r| r.id).collect();
    for id in ["before", "after", "later"] {
        assert!(ids.iter().any(|got| got == id), "{id} is on Kafka: {ids:?}");
    }
}
