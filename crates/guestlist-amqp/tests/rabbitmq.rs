//! The broker suite on RabbitMQ (a quorum queue), with PostgreSQL and with SQLite as the store.

mod common;

guestlist_testkit::broker_suite!(rpg, common::Rabbit, sqlx::Postgres);
guestlist_testkit::broker_suite!(rlite, common::Rabbit, sqlx::Sqlite);
guestlist_testkit::keys_suite!(rkeys, common::Rabbit, sqlx::Postgres);
guestlist_testkit::dead_letters_suite!(rdead, common::Rabbit, sqlx::Postgres);
guestlist_testkit::outage_suite!(rout, common::Rabbit);
guestlist_testkit::broker_away_suite!(raway, common::Rabbit);

/// `declare_quorum_queue` makes a quorum queue (RabbitMQ then refuses it as a classic one), leaves
/// it as it is when declared again, and refuses a classic queue of that name with RabbitMQ's reason.
#[tokio::test]
async fn declare_quorum_queue_makes_one_and_refuses_a_classic_queue_of_its_name() {
    use lapin::options::{QueueDeclareOptions, QueueDeleteOptions};
    use lapin::types::{AMQPValue, FieldTable, LongString};

    let url = std::env::var("GUESTLIST_TEST_AMQP_URL")
        .unwrap_or_else(|_| "amqp://guest:guest@127.0.0.1:5672/%2f".to_owned());
    let connection = lapin::Connection::connect(&url, lapin::ConnectionProperties::default())
        .await
        .unwrap_or_else(|err| panic!("RabbitMQ at {url}: {err}; scripts/test.sh starts it"));
    let (quorum, classic) = ("gl.declare.quorum", "gl.declare.classic");
    let channel = connection.create_channel().await.unwrap();
    for queue in [quorum, classic] {
        let _ = channel
            .queue_delete(queue.into(), QueueDeleteOptions::default())
            .await;
    }
    let durable = QueueDeclareOptions {
        durable: true,
        ..QueueDeclareOptions::default()
    };

    guestlist_amqp::declare_quorum_queue(&channel, quorum)
        .await
        .expect("declared");
    guestlist_amqp::declare_quorum_queue(&channel, quorum)
        .await
        .expect("declared again: left as it is");
    let mut as_classic = FieldTable::default();
    as_classic.insert(
        "x-queue-type".into(),
        AMQPValue::LongString(LongString::from("classic")),
    );
    let other = connection.create_channel().await.unwrap();
    assert!(
        other
            .queue_declare(quorum.into(), durable, as_classic)
            .await
            .is_err(),
        "the queue is a quorum queue, not a classic one"
    );

    let other = connection.create_channel().await.unwrap();
    other
        .queue_declare(classic.into(), durable, FieldTable::default())
        .await
        .unwrap();
    let err = guestlist_amqp::declare_quorum_queue(&other, classic)
        .await
        .expect_err("a classic queue is no quorum queue");
    assert!(
        err.to_string().contains("PRECONDITION_FAILED"),
        "RabbitMQ's reason is in the error: {err}"
    );
    let cleanup = connection.create_channel().await.unwrap();
    for queue in [quorum, classic] {
        cleanup
            .queue_delete(queue.into(), QueueDeleteOptions::default())
            .await
            .unwrap();
    }
}
