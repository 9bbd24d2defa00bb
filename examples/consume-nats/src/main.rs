//! Inbox + NATS JetStream consumer + carried key, from the README alone: every `OrderPaid` on
//! the `ORDERS` stream makes one pick task and one charge, however often it is delivered.
//!
//! Run it against a PostgreSQL with `pick_tasks (event TEXT)` and a JetStream stream `ORDERS`:
//! `cargo run -p consume-nats-example -- postgres://postgres@127.0.0.1:5432/test`.

use guestlist::carry::{CarryKey, Step};
use guestlist::consumer::{Consumer, IdFrom, shutdown_signal};
use guestlist::nats::JetStreamSource;
use guestlist::sqlx::{self, PgPool};
use guestlist::{HandlerName, Inbox};
use reqwest_middleware::{ClientBuilder, ClientWithMiddleware};

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let url = std::env::args()
        .nth(1)
        .unwrap_or_else(|| "postgres://postgres@127.0.0.1:5432/test".to_owned());
    let pool = PgPool::connect(&url).await?;
    let inbox = Inbox::<sqlx::Postgres>::new();
    inbox.migrate(&pool).await?;
    let source = JetStreamSource::builder("nats://127.0.0.1:4222", "ORDERS", "warehouse")
        .dead_letter("orders.dead")
        .connect()
        .await?;
    let payments = payments_client();
    let handled = Consumer::new(
        source,
        pool,
        inbox,
        HandlerName::new("warehouse")?,
        IdFrom::BrokerId,
        async move |tx, message| -> anyhow::Result<()> {
            sqlx::query("INSERT INTO pick_tasks (event) VALUES ($1)")
                .bind(message.id.as_str())
                .execute(&mut *tx)
                .await?;
            // The key is warehouse:<message id>/charge on every delivery of this message.
            charge(&payments).await?;
            Ok(())
        },
    )
    .run(shutdown_signal()) // SIGTERM: finish and acknowledge the batch in hand, then stop
    .await?;
    println!("{handled:?}");
    Ok(())
}

fn payments_client() -> ClientWithMiddleware {
    ClientBuilder::new(reqwest::Client::new())
        .with(CarryKey::new())
        .build()
}

async fn charge(client: &ClientWithMiddleware) -> reqwest_middleware::Result<()> {
    client
        .post("https://payments.example/v1/charges")
        .with_extension(Step("charge".into()))
        .send()
        .await?
        .error_for_status()?;
    Ok(())
}
