//! Refused at start-up: a retention shorter than the redelivery horizon, a missing queue, a
//! missing inbox table.

use std::time::Duration;

use crate::{Database, Fixture, short_tag};
use guestlist_consumer::Error;
use guestlist_core::Retention;
use guestlist_sqlx::Inbox;

use crate::brokers::Broker;
use crate::brokers::rig::{Rig, order_paid};

/// A consumer whose inbox forgets ids sooner than the broker may redeliver is refused at start.
pub async fn a_retention_shorter_than_the_redelivery_horizon_is_refused<B: Broker, DB: Fixture>(
    name: &str,
) {
    let tag = short_tag(name);
    let broker = B::horizon_stream(&tag).await;
    let rig = Rig::<B, DB>::around(broker, Database::open(4).await, &tag);
    let day = Retention::new(Duration::from_secs(86_400), Duration::from_secs(86_400)).unwrap();
    match rig.consumer(1).await.retention(day).check() {
        Err(Error::RetentionShorterThanRedelivery { .. }) => {}
        Ok(()) if !B::REDELIVERS_IN_TIME => {} // RabbitMQ and Kafka do not bound redeliveries by time
        other => panic!("expected a refusal, got {other:?}"),
    }
    let stalls = rig
        .consumer(1)
        .await
        .keep_alive(false)
        .handler_timeout(Duration::from_secs(3600))
        .check();
    if B::REDELIVERS_IN_TIME {
        assert!(
            matches!(stalls, Err(Error::AckWaitTooShort { .. })),
            "{stalls:?}"
        );
        let message = stalls.unwrap_err().to_string();
        assert!(
            message.contains("raise the consumer's ack wait"),
            "{message}"
        );
    }
}

/// A consumer of a queue (stream) that does not exist is refused at start-up, with what to do.
#[allow(clippy::extra_unused_type_parameters)] // every story has the signature the macro calls
pub async fn a_missing_queue_is_refused_at_start_up<B: Broker, DB: Fixture>(name: &str) {
    let broker = B::open(&short_tag(name), Duration::from_secs(30)).await;
    let error = broker.missing().await;
    assert!(error.contains("does not exist"), "{error}");
    assert!(
        error.contains("first"),
        "the error says to create it first: {error}"
    );
}

/// A consumer whose inbox table is missing is refused at start-up and dead-letters nothing.
pub async fn a_missing_inbox_table_is_refused_at_start_and_dead_letters_nothing<
    B: Broker,
    DB: Fixture,
>(
    name: &str,
) {
    let rig = Rig::<B, DB>::open(name, Duration::from_secs(30)).await;
    rig.broker.publish(&order_paid("evt_1")).await;
    let never = Inbox::<DB>::with_table(&format!("gl_{}_nm", rig.tag)).unwrap();
    for table in [
        format!("{}_deferrals", never.table()),
        never.table().to_string(),
    ] {
        rig.db.exec(format!("DROP TABLE IF EXISTS {table}")).await;
    }
    // No table at all, then the inbox's table without its deferrals.
    for missing in ["the inbox", "its deferrals"] {
        if missing == "its deferrals" {
            never.migrate(&rig.db.pool).await.unwrap();
            rig.db
                .exec(format!("DROP TABLE {}_deferrals", never.table()))
                .await;
        }
        let consumer = rig.consumer_on(rig.db.pool.clone(), never.clone()).await;
        let refused = tokio::time::timeout(
            Duration::from_secs(30),
            consumer.run(std::future::pending()),
        )
        .await
        .unwrap_or_else(|_| panic!("{}: without {missing}, run never returned", B::LABEL));
        match refused {
            Err(err @ Error::MissingTable(_)) => {
                let text = err.to_string();
                assert!(
                    text.contains("guestlist migrate --database URL")
                        && text.contains("Inbox::migrate"),
                    "the error says what to run: {text}"
                );
            }
            other => panic!(
                "{}: without {missing}, expected a refusal, got {other:?}",
                B::LABEL
            ),
        }
    }
    assert!(
        rig.broker.dead_letters().await.is_empty(),
        "nothing dead-lettered"
    );
    // A source may have taken the message on before the refusal (RabbitMQ pushes to a consumer at
    // once); it goes back when that channel closes, which the broker does on its own time.
    rig.until(
        Duration::from_secs(10),
        "the message is back on the broker, unsettled",
        || async { rig.broker.outstanding().await == 1 },
    )
    .await;
}
