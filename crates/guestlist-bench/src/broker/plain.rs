//! `plain`: what a user writes without guestlist. The broker's usual client loop, one message at
//! a time: its work in a transaction of its own, commit, then a plain acknowledgement. No claim,
//! so a redelivery would do the work twice.

use std::time::Instant;

use futures_util::StreamExt;
use guestlist::sqlx::PgPool;

use super::queues::Queue;
use super::work;

/// Consumes `events` messages from `queue` the plain way; `started` is reset where the timing
/// must begin later than the call (Kafka: at the first record, once the group has joined).
pub(super) async fn drain(
    queue: &Queue,
    pool: &PgPool,
    events: usize,
    started: &mut Instant,
) -> anyhow::Result<()> {
    match queue {
        Queue::Sqs { .. } => anyhow::bail!("plain is not measured on SQS: see baseline"),
        Queue::Kafka { brokers, topic, .. } => {
            use rdkafka::Message;
            use rdkafka::consumer::{CommitMode, Consumer, StreamConsumer};
            let consumer: StreamConsumer = rdkafka::ClientConfig::new()
                .set("bootstrap.servers", brokers)
                .set("group.id", format!("plain-{topic}-{}", std::process::id()))
                .set("enable.auto.commit", "false")
                .set("auto.offset.reset", "earliest")
                .create()?;
            consumer.subscribe(&[topic])?;
            for n in 0..events {
                let message = consumer.recv().await?;
                if n == 0 {
                    // Timed from here: joining the group is not the loop's speed.
                    *started = Instant::now();
                }
                handle(pool, message.payload().unwrap_or_default()).await?;
                consumer.commit_message(&message, CommitMode::Async)?;
            }
        }
        Queue::Nats {
            context, stream, ..
        } => {
            use async_nats::jetstream::consumer::{AckPolicy, PullConsumer, pull};
            let consumer: PullConsumer = context
                .get_stream(stream)
                .await?
                .get_or_create_consumer(
                    "plain",
                    pull::Config {
                        durable_name: Some("plain".into()),
                        ack_policy: AckPolicy::Explicit,
                        ..Default::default()
                    },
                )
                .await?;
            let mut messages = consumer.messages().await?;
            for _ in 0..events {
                let message = messages
                    .next()
                    .await
                    .ok_or_else(|| anyhow::anyhow!("the stream ended"))?
                    .map_err(|e| anyhow::anyhow!(e))?;
                handle(pool, &message.payload).await?;
                message.ack().await.map_err(|e| anyhow::anyhow!(e))?;
            }
        }
        Queue::Rabbit { url, queue, .. } => {
            use lapin::options::{BasicAckOptions, BasicConsumeOptions, BasicQosOptions};
            let connection =
                lapin::Connection::connect(url, lapin::ConnectionProperties::default()).await?;
            let channel = connection.create_channel().await?;
            channel.basic_qos(100, BasicQosOptions::default()).await?;
            let mut deliveries = channel
                .basic_consume(
                    queue.as_str().into(),
                    "plain".into(),
                    BasicConsumeOptions::default(),
                    Default::default(),
                )
                .await?;
            for _ in 0..events {
                let delivery = deliveries
                    .next()
                    .await
                    .ok_or_else(|| anyhow::anyhow!("the consumer was cancelled"))??;
                handle(pool, &delivery.data).await?;
                delivery.ack(BasicAckOptions::default()).await?;
            }
        }
    }
    Ok(())
}

/// The work for one message, on its own transaction.
async fn handle(pool: &PgPool, payload: &[u8]) -> anyhow::Result<()> {
    let event: serde_json::Value = serde_json::from_slice(payload)?;
    let mut tx = pool.begin().await?;
    work(&mut tx, event["id"].as_str().unwrap_or_default()).await?;
    tx.commit().await?;
    Ok(())
}
