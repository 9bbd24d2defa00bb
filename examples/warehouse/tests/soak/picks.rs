//! The next hop: the `PickTaskCreated` the relays publish, read back for the checker. RabbitMQ's
//! and SQS's queues are emptied every few seconds while the run goes on, as a consumer of the
//! next hop would: a queue left to grow for the whole run slows moto's every send (it counts a
//! queue's messages to send one). NATS's and Kafka's streams keep them, and are read at the end.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use warehouse_example::broker::{Kind, Orders};

/// How often the queues are emptied.
const EVERY: Duration = Duration::from_secs(5);

/// Takes the `PickTaskCreated` off `orders`' queue every few seconds until `stop` is set, when
/// the broker's queue gives them up as they are read (RabbitMQ, SQS); their ids, repeats
/// included. `orders` must be reached directly, past the nemesis's links: a read cut midway
/// would lose what it took.
pub async fn take_while_running(orders: Orders, stop: Arc<AtomicBool>) -> Vec<String> {
    let mut taken = Vec::new();
    if !matches!(orders.kind(), Kind::Rabbit | Kind::Sqs) {
        return taken;
    }
    while !stop.load(Ordering::Relaxed) {
        match orders.picks_published().await {
            Ok(ids) => taken.extend(ids),
            Err(err) => eprintln!("picks: could not take the PickTaskCreated yet: {err:#}"),
        }
        tokio::time::sleep(EVERY).await;
    }
    taken
}
