//! The outbox and its relay to Kafka, from the README alone: the order and its `orders.paid`
//! event commit in one transaction, and the relay publishes what committed, each order's events
//! in commit order, stamping each once Kafka confirmed it.
//!
//! Run it against a PostgreSQL with `orders (id BIGINT, status TEXT)` and a Kafka with the topic
//! `orders.paid`: `cargo run -p outbox-kafka-example -- postgres://postgres@127.0.0.1:5432/test`.

use guestlist::kafka::KafkaPublisher;
use guestlist::sqlx::{self, PgPool};
use guestlist::{MessageId, Outbox, Outgoing, Relay, Topic, outbox::OrderingKey};

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let url = std::env::args()
        .nth(1)
        .unwrap_or_else(|| "postgres://postgres@127.0.0.1:5432/test".to_owned());
    let pool = PgPool::connect(&url).await?;
    let outbox = Outbox::<sqlx::Postgres>::new();
    outbox.migrate(&pool).await?;

    let mut tx = pool.begin().await?;
    sqlx::query("INSERT INTO orders (id, status) VALUES (42, 'PAID')")
        .execute(&mut *tx)
        .await?;
    let paid = Outgoing::new(Topic::new("orders.paid")?, br#"{"order":42}"#.to_vec())
        .id(MessageId::new("evt_order42_paid")?)
        .ordering_key(OrderingKey::new("order-42")?);
    outbox.enqueue(&mut *tx, &paid).await?;
    tx.commit().await?; // the order and its event, together

    let publisher = KafkaPublisher::builder("127.0.0.1:9092").connect().await?;
    let relayed = Relay::new(outbox, pool, publisher)
        .run(async {
            tokio::signal::ctrl_c().await.ok();
        })
        .await?;
    println!("published {}", relayed.published);
    Ok(())
}
