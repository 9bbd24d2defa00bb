//! The queue guestlist consumes, declared as it needs it.

use lapin::Channel;
use lapin::options::QueueDeclareOptions;
use lapin::types::{AMQPValue, FieldTable, LongString};

use crate::Error;

/// Declares `name` on `channel` as a durable **quorum queue**, the kind [`RabbitSource`]
/// needs: it counts deliveries (`x-delivery-count`), by which the runtime tells a poison
/// message from a new one. A queue that already exists as such is left as it is; one that
/// exists as another kind is refused by RabbitMQ (`PRECONDITION_FAILED`), and the error says so.
///
/// ```no_run
/// # async fn run() -> Result<(), guestlist_amqp::Error> {
/// let connection = lapin::Connection::connect(
///     "amqp://guest:guest@127.0.0.1:5672/%2f",
///     lapin::ConnectionProperties::default(),
/// )
/// .await?;
/// let channel = connection.create_channel().await?;
/// guestlist_amqp::declare_quorum_queue(&channel, "orders").await?;
/// # Ok(()) }
/// ```
///
/// [`RabbitSource`]: crate::RabbitSource
pub async fn declare_quorum_queue(channel: &Channel, name: &str) -> Result<(), Error> {
    let mut arguments = FieldTable::default();
    arguments.insert(
        "x-queue-type".into(),
        AMQPValue::LongString(LongString::from("quorum")),
    );
    let durable = QueueDeclareOptions {
        durable: true,
        ..QueueDeclareOptions::default()
    };
    channel
        .queue_declare(name.into(), durable, arguments)
        .await?;
    Ok(())
}
