//! RabbitMQ: the quorum queue `ORDERS`, its dead letters in `ORDERS.dead`, the warehouse's own
//! events in `ORDERS.picks`, each reached through the default exchange.

use anyhow::Context as _;
use lapin::options::{
    BasicGetOptions, BasicPublishOptions, ConfirmSelectOptions, QueueDeclareOptions,
    QueueDeleteOptions,
};
use lapin::types::{FieldTable, ShortString};
use lapin::{BasicProperties, Connection, ConnectionProperties};

use super::Orders;
use crate::warehouse::OrderPaid;

/// Declares the quorum queue and the two plain ones where missing.
pub(super) async fn declare(orders: &Orders) -> anyhow::Result<()> {
    let (connection, channel) = connect(orders).await?;
    let queue = &orders.name;
    guestlist::amqp::declare_quorum_queue(&channel, queue)
        .await
        .with_context(|| format!("declaring queue {queue} on the broker"))?;
    let durable = QueueDeclareOptions {
        durable: true,
        ..QueueDeclareOptions::default()
    };
    for queue in [orders.dead_letters(), orders.picks()] {
        channel
            .queue_declare(
                ShortString::from(queue.as_str()),
                durable,
                FieldTable::default(),
            )
            .await
            .with_context(|| format!("declaring queue {queue} on the broker"))?;
    }
    connection.close(200, ShortString::from("declared")).await?;
    Ok(())
}

/// Deletes the three queues, where present.
pub(super) async fn remove(orders: &Orders) -> anyhow::Result<()> {
    for queue in [orders.name.clone(), orders.dead_letters(), orders.picks()] {
        // A failed delete closes its channel: one channel per queue.
        let (connection, channel) = connect(orders).await?;
        let _ = channel
            .queue_delete(
                ShortString::from(queue.as_str()),
                QueueDeleteOptions::default(),
            )
            .await;
        let _ = connection.close(200, ShortString::from("removed")).await;
    }
    Ok(())
}

/// Publishes `payload` to the queue and waits for the broker's confirm.
pub(super) async fn publish(
    orders: &Orders,
    event: &OrderPaid,
    payload: &[u8],
) -> anyhow::Result<()> {
    let (connection, channel) = connect(orders).await?;
    channel
        .confirm_select(ConfirmSelectOptions::default())
        .await?;
    channel
        .basic_publish(
            ShortString::from(""),
            ShortString::from(orders.name.as_str()),
            BasicPublishOptions::default(),
            payload,
            properties(event),
        )
        .await?
        .await
        .context("the queue did not confirm the event")?;
    connection
        .close(200, ShortString::from("published"))
        .await?;
    Ok(())
}

/// Ready messages in the queue and its dead letters (those delivered and not yet acknowledged
/// count once the consumers stop).
pub(super) async fn left_over(orders: &Orders) -> anyhow::Result<Vec<String>> {
    let (connection, channel) = connect(orders).await?;
    let passive = QueueDeclareOptions {
        passive: true,
        ..QueueDeclareOptions::default()
    };
    let mut left = Vec::new();
    for queue in [orders.name.clone(), orders.dead_letters()] {
        let declared = channel
            .queue_declare(
                ShortString::from(queue.as_str()),
                passive,
                FieldTable::default(),
            )
            .await?;
        if declared.message_count() > 0 {
            left.push(format!("{} in {queue}", declared.message_count()));
        }
    }
    let _ = connection.close(200, ShortString::from("checked")).await;
    Ok(left)
}

/// The payload of every message in `ORDERS.picks`, taken off the queue.
pub(super) async fn picks(orders: &Orders) -> anyhow::Result<Vec<Vec<u8>>> {
    let (connection, channel) = connect(orders).await?;
    let take = BasicGetOptions { no_ack: true };
    let mut picks = Vec::new();
    let queue = ShortString::from(orders.picks().as_str());
    while let Some(message) = channel.basic_get(queue.clone(), take).await? {
        picks.push(message.delivery.data);
    }
    let _ = connection.close(200, ShortString::from("read")).await;
    Ok(picks)
}

/// A consumer of the queue, consuming when this returns.
pub(super) async fn source(orders: &Orders) -> anyhow::Result<guestlist::amqp::RabbitSource> {
    Ok(
        guestlist::amqp::RabbitSource::builder(&orders.url, &orders.name)
            .dead_letter("", &orders.dead_letters())
            .connect()
            .await?,
    )
}

async fn connect(orders: &Orders) -> anyhow::Result<(Connection, lapin::Channel)> {
    let connection = Connection::connect(&orders.url, ConnectionProperties::default())
        .await
        .context("connecting to RabbitMQ")?;
    let channel = connection.create_channel().await?;
    Ok((connection, channel))
}

/// The AMQP properties of `event`: persistent, and its id (if it has one) as `message_id`.
fn properties(event: &OrderPaid) -> BasicProperties {
    let properties = match &event.id {
        Some(id) => guestlist::amqp::with_message_id(id),
        None => BasicProperties::default(),
    };
    properties.with_delivery_mode(2)
}
