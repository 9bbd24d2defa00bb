//! How long a message takes from its commit to a subscriber when traffic is thin (100 a second),
//! through a running relay woken by PostgreSQL's notifications.

use std::collections::HashMap;
use std::time::{Duration, Instant};

use futures_util::StreamExt;
use guestlist::sqlx::{self, PgPool};
use guestlist::{MessageId, Outbox, Outgoing, Relay, Topic, outbox::Publish};
use tokio::sync::mpsc::UnboundedSender;

use crate::broker::queues::Queue;
use crate::report::Latency;

/// Commits `count` messages at `per_sec`, each on its own transaction, with a relay running,
/// and returns the percentiles of commit-to-arrival at a subscriber of `queue`.
pub(super) async fn measure<P: Publish + 'static>(
    pool: &PgPool,
    outbox: &Outbox<sqlx::Postgres>,
    publisher: P,
    queue: &Queue,
    count: usize,
    per_sec: u32,
) -> anyhow::Result<Latency> {
    let (arrived, mut arrivals) = tokio::sync::mpsc::unbounded_channel();
    let subscriber = subscribe(queue, arrived).await?;
    let relay = Relay::new(outbox.clone(), pool.clone(), publisher);
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let relaying = tokio::spawn(async move {
        relay
            .run(async move {
                let _ = stopped.await;
            })
            .await
    });
    // The stream starts once the relay is up: connected, holding every shard.
    let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
    while !outbox.stats(pool).await?.unheld().is_empty() {
        anyhow::ensure!(
            tokio::time::Instant::now() < deadline,
            "the relay never took the shards"
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let topic = Topic::new(queue.topic())?;
    let mut committed = HashMap::with_capacity(count);
    let mut ticks = tokio::time::interval(Duration::from_secs(1) / per_sec);
    for n in 0..count {
        ticks.tick().await;
        let id = format!("evt_latency_{n}_{}", std::process::id());
        let message = Outgoing::new(topic.clone(), b"{}".to_vec()).id(MessageId::new(&id)?);
        let mut tx = pool.begin().await?;
        outbox.enqueue(&mut *tx, &message).await?;
        tx.commit().await?;
        committed.insert(id, Instant::now());
    }
    let mut latencies = Vec::with_capacity(count);
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    while latencies.len() < count {
        match tokio::time::timeout_at(deadline, arrivals.recv()).await {
            Ok(Some((id, at))) => {
                if let Some(commit) = committed.get(&id) {
                    latencies.push(at.saturating_duration_since(*commit));
                }
            }
            _ => anyhow::bail!("{} of {count} messages arrived", latencies.len()),
        }
    }
    let _ = stop.send(());
    relaying.await??;
    subscriber.abort();
    Ok(Latency::of(&mut latencies))
}

/// Sends each message's id and arrival time as `queue` delivers it.
async fn subscribe(
    queue: &Queue,
    arrived: UnboundedSender<(String, Instant)>,
) -> anyhow::Result<tokio::task::JoinHandle<()>> {
    Ok(match queue {
        Queue::Kafka { .. } | Queue::Sqs { .. } => {
            anyhow::bail!("the outbox bench measures NATS and RabbitMQ")
        }
        Queue::Nats { context, .. } => {
            let mut messages = context.client().subscribe(queue.topic()).await?;
            tokio::spawn(async move {
                while let Some(message) = messages.next().await {
                    let id = message
                        .headers
                        .as_ref()
                        .and_then(|h| h.get("Nats-Msg-Id"))
                        .map(|id| id.as_str().to_owned())
                        .unwrap_or_default();
                    let _ = arrived.send((id, Instant::now()));
                }
            })
        }
        Queue::Rabbit {
            url, queue: name, ..
        } => {
            let connection =
                lapin::Connection::connect(url, lapin::ConnectionProperties::default()).await?;
            let channel = connection.create_channel().await?;
            let mut deliveries = channel
                .basic_consume(
                    name.as_str().into(),
                    "bench_latency".into(),
                    lapin::options::BasicConsumeOptions {
                        no_ack: true,
                        ..Default::default()
                    },
                    lapin::types::FieldTable::default(),
                )
                .await?;
            tokio::spawn(async move {
                let _connection = connection;
                while let Some(Ok(delivery)) = deliveries.next().await {
                    let id = delivery
                        .properties
                        .message_id()
                        .as_ref()
                        .map(|id| id.to_string())
                        .unwrap_or_default();
                    let _ = arrived.send((id, Instant::now()));
                }
            })
        }
    })
}
