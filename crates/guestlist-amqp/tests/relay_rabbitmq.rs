//! The outbox relay to RabbitMQ, from PostgreSQL, SQLite and MariaDB/MySQL. Module names start
//! with two letters no other broker suite's test module uses: they name queues and tables.

mod common;

guestlist_testkit::relay_suite!(qpg, common::Rabbit, sqlx::Postgres);
guestlist_testkit::relay_suite!(qlite, common::Rabbit, sqlx::Sqlite);
guestlist_testkit::relay_suite!(qmy, common::Rabbit, sqlx::MySql);
guestlist_testkit::relay_wire_suite!(qwire, common::Rabbit);
guestlist_testkit::relay_shares_suite!(qshpg, common::Rabbit, sqlx::Postgres);

use common::Rabbit;
use guestlist_sqlx::{OutboxMessage, Outcomes, Publish};
use guestlist_testkit::brokers::Broker;

/// One pipelined batch of 400, every other message to a routing key no queue is bound to, five
/// times over: RabbitMQ confirms them with `multiple` acks, and lapin hands the returned
/// messages to those acks' confirmations in no particular order. Each message's outcome must be
/// its own: the 200 routed nowhere refused, the 200 others confirmed, and the queue holding
/// exactly those.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn each_returned_message_is_told_by_its_own_id_in_a_pipelined_batch() {
    let rabbit = Rabbit::open("qrt_returned_by_id", std::time::Duration::from_secs(30)).await;
    let publisher = rabbit.publisher().await;
    let nowhere = rabbit.nowhere("qrt_returned_by_id");
    for round in 0..5 {
        let messages: Vec<OutboxMessage> = (0..400)
            .map(|n| {
                let topic = if n % 2 == 0 {
                    rabbit.topic()
                } else {
                    nowhere.clone()
                };
                OutboxMessage::new(format!("evt_{round}_{n}"), topic, b"{}".to_vec())
            })
            .collect();
        let mut outcomes = Outcomes::with_capacity(messages.len());
        publisher.publish(&messages, &mut outcomes).await;
        let results = outcomes.into_results(messages.len());
        let misread: Vec<String> = results
            .iter()
            .zip(&messages)
            .enumerate()
            .filter(|(n, (result, _))| result.is_ok() != (n % 2 == 0))
            .map(|(_, (result, message))| format!("{} {result:?}", message.message_id))
            .collect();
        assert!(
            misread.is_empty(),
            "round {round}: outcomes paired with the wrong messages: {misread:?}"
        );
    }
    let received = rabbit.received().await;
    assert_eq!(received.len(), 1_000, "the 1,000 routable, once each");
}
