//! NATS JetStream: the stream `ORDERS` on `orders.paid`, its dead letters in `ORDERS_DEAD`, the
//! warehouse's own events in `ORDERS_PICKS`.

use std::time::Duration;

use anyhow::Context as _;
use async_nats::jetstream;

use super::Orders;

/// Creates the three streams where missing.
pub(super) async fn declare(orders: &Orders) -> anyhow::Result<()> {
    let context = connect(orders).await?;
    for (name, subject) in [
        (orders.name.clone(), orders.subject()),
        (format!("{}_DEAD", orders.name), orders.dead_letters()),
        (orders.picks_stream(), orders.picks()),
    ] {
        let config = jetstream::stream::Config {
            name: name.clone(),
            subjects: vec![subject],
            ..Default::default()
        };
        if let Err(err) = context.get_or_create_stream(config).await {
            // Services that start together race to create it, and the losers are told its
            // subjects overlap with a stream: the one the winner just made.
            context
                .get_stream(&name)
                .await
                .map_err(|_| err)
                .with_context(|| format!("creating stream {name} on {}", orders.url))?;
        }
    }
    Ok(())
}

/// Deletes the three streams, where present.
pub(super) async fn remove(orders: &Orders) -> anyhow::Result<()> {
    let context = connect(orders).await?;
    for stream in [
        orders.name.clone(),
        format!("{}_DEAD", orders.name),
        orders.picks_stream(),
    ] {
        // Deleting a stream that is not there fails; that is what we want anyway.
        let _ = context.delete_stream(&stream).await;
    }
    Ok(())
}

/// Publishes `payload` on the stream's subject and waits for the stream to store it.
pub(super) async fn publish(orders: &Orders, payload: Vec<u8>) -> anyhow::Result<()> {
    // No Nats-Msg-Id: the server would drop a republished event itself, and the example is
    // about the duplicates that reach the consumer anyway (the id is in the payload).
    connect(orders)
        .await?
        .publish(orders.subject(), payload.into())
        .await?
        .await
        .context("the stream did not confirm the event")?;
    Ok(())
}

/// The durable consumer `warehouse`'s pending and unacknowledged messages, and dead letters.
pub(super) async fn left_over(orders: &Orders) -> anyhow::Result<Vec<String>> {
    let context = connect(orders).await?;
    let mut left = Vec::new();
    let mut consumer: jetstream::consumer::PullConsumer = context
        .get_stream(&orders.name)
        .await?
        .get_consumer("warehouse")
        .await
        .map_err(|err| anyhow::anyhow!("the consumer warehouse: {err}"))?;
    let info = consumer.info().await?;
    if info.num_pending + info.num_ack_pending as u64 > 0 {
        left.push(format!(
            "{} pending, {} awaiting acknowledgement",
            info.num_pending, info.num_ack_pending
        ));
    }
    let mut dead = context.get_stream(format!("{}_DEAD", orders.name)).await?;
    let dead_letters = dead.info().await?.state.messages;
    if dead_letters > 0 {
        left.push(format!("{dead_letters} dead letters"));
    }
    Ok(left)
}

/// The payload of every message in `ORDERS_PICKS`, in the stream's order.
pub(super) async fn picks(orders: &Orders) -> anyhow::Result<Vec<Vec<u8>>> {
    let context = connect(orders).await?;
    let mut stream = context.get_stream(orders.picks_stream()).await?;
    let state = stream.info().await?.state.clone();
    let mut picks = Vec::new();
    if state.messages > 0 {
        for sequence in state.first_sequence..=state.last_sequence {
            picks.push(stream.get_raw_message(sequence).await?.payload.to_vec());
        }
    }
    Ok(picks)
}

/// The durable consumer `warehouse`, with `ack_wait`, created or bound when this returns.
pub(super) async fn source(
    orders: &Orders,
    ack_wait: Duration,
) -> anyhow::Result<guestlist::nats::JetStreamSource> {
    Ok(
        guestlist::nats::JetStreamSource::builder(&orders.url, &orders.name, "warehouse")
            .ack_wait(ack_wait)
            .dead_letter(&orders.dead_letters())
            .connect()
            .await?,
    )
}

async fn connect(orders: &Orders) -> anyhow::Result<jetstream::Context> {
    let client = async_nats::connect(&orders.url)
        .await
        .with_context(|| format!("connecting to NATS at {}", orders.url))?;
    Ok(jetstream::new(client))
}
