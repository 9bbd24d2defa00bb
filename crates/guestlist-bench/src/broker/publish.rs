//! Loading a bench queue: events published and confirmed by the broker, in bulk, fed to SQS at a
//! bounded depth, or one at a time.

use std::time::Duration;

use super::queues::Queue;

impl Queue {
    /// Publishes `count` OrderPaid events with distinct ids, confirmed by the broker.
    pub(super) async fn publish(&self, count: usize) -> anyhow::Result<()> {
        const IN_FLIGHT: usize = 500;
        for chunk in (0..count).collect::<Vec<_>>().chunks(IN_FLIGHT) {
            match self {
                Queue::Sqs { client, url, .. } => {
                    // Ten to a request (SQS's limit), fifty requests in flight.
                    let requests = chunk.chunks(10).map(|ten| {
                        let entries = ten
                            .iter()
                            .map(|n| {
                                guestlist_sqs::aws_sdk_sqs::types::SendMessageBatchRequestEntry::builder()
                                    .id(n.to_string())
                                    .message_body(String::from_utf8_lossy(&payload(*n)))
                                    .build()
                            })
                            .collect::<Result<Vec<_>, _>>();
                        async move {
                            let sent = client
                                .send_message_batch()
                                .queue_url(url)
                                .set_entries(Some(entries?))
                                .send()
                                .await?;
                            anyhow::ensure!(sent.failed.is_empty(), "SQS refused: {:?}", sent.failed);
                            Ok(())
                        }
                    });
                    for sent in futures_util::future::join_all(requests).await {
                        sent?;
                    }
                }
                Queue::Kafka {
                    producer, topic, ..
                } => {
                    let mut sent = Vec::with_capacity(chunk.len());
                    for n in chunk {
                        let payload = payload(*n);
                        let record = rdkafka::producer::FutureRecord::<(), [u8]>::to(topic)
                            .payload(&payload);
                        sent.push(producer.send_result(record).map_err(|(err, _)| err)?);
                    }
                    for delivery in sent {
                        delivery.await?.map_err(|(err, _)| err)?;
                    }
                }
                Queue::Nats {
                    context, stream, ..
                } => {
                    let mut acks = Vec::with_capacity(chunk.len());
                    for n in chunk {
                        acks.push(
                            context
                                .publish(format!("{stream}.events"), payload(*n).into())
                                .await?,
                        );
                    }
                    for ack in acks {
                        ack.await?;
                    }
                }
                Queue::Rabbit { channel, queue, .. } => {
                    let mut confirms = Vec::with_capacity(chunk.len());
                    for n in chunk {
                        confirms.push(
                            channel
                                .basic_publish(
                                    "".into(),
                                    queue.as_str().into(),
                                    lapin::options::BasicPublishOptions::default(),
                                    &payload(*n),
                                    lapin::BasicProperties::default().with_delivery_mode(2),
                                )
                                .await?,
                        );
                    }
                    for confirm in confirms {
                        confirm.await?;
                    }
                }
            }
        }
        Ok(())
    }

    /// Publishes `count` events to an SQS queue from a task, ten to a request, keeping at most
    /// `depth` waiting: moto scans a queue's every message on each receive, so a queue loaded
    /// up front measures moto's scan rather than the consumer.
    pub(super) fn feed_sqs(
        &self,
        count: usize,
        depth: u64,
    ) -> anyhow::Result<tokio::task::JoinHandle<anyhow::Result<()>>> {
        let Queue::Sqs { client, url, .. } = self else {
            anyhow::bail!("only SQS queues are fed");
        };
        let (client, url) = (client.clone(), url.clone());
        Ok(tokio::spawn(async move {
            use guestlist_sqs::aws_sdk_sqs::types::{
                QueueAttributeName, SendMessageBatchRequestEntry,
            };
            for ten in (0..count).collect::<Vec<_>>().chunks(10) {
                loop {
                    let attributes = client
                        .get_queue_attributes()
                        .queue_url(&url)
                        .attribute_names(QueueAttributeName::ApproximateNumberOfMessages)
                        .send()
                        .await?
                        .attributes
                        .unwrap_or_default();
                    let waiting: u64 = attributes
                        .get(&QueueAttributeName::ApproximateNumberOfMessages)
                        .and_then(|n| n.parse().ok())
                        .unwrap_or(0);
                    if waiting < depth {
                        break;
                    }
                    tokio::time::sleep(Duration::from_millis(20)).await;
                }
                let entries = ten
                    .iter()
                    .map(|n| {
                        SendMessageBatchRequestEntry::builder()
                            .id(n.to_string())
                            .message_body(String::from_utf8_lossy(&payload(*n)))
                            .build()
                    })
                    .collect::<Result<Vec<_>, _>>()?;
                let sent = client
                    .send_message_batch()
                    .queue_url(&url)
                    .set_entries(Some(entries))
                    .send()
                    .await?;
                anyhow::ensure!(sent.failed.is_empty(), "SQS refused: {:?}", sent.failed);
            }
            Ok(())
        }))
    }

    /// Publishes one event with the id `id`, confirmed by the broker.
    pub(super) async fn publish_one(&self, id: &str) -> anyhow::Result<()> {
        let payload = format!(r#"{{"id":"{id}","type":"OrderPaid","order":1}}"#).into_bytes();
        match self {
            Queue::Sqs { client, url, .. } => {
                client
                    .send_message()
                    .queue_url(url)
                    .message_body(String::from_utf8_lossy(&payload))
                    .send()
                    .await?;
            }
            Queue::Kafka {
                producer, topic, ..
            } => {
                let record =
                    rdkafka::producer::FutureRecord::<(), [u8]>::to(topic).payload(&payload);
                producer
                    .send(record, Duration::from_secs(10))
                    .await
                    .map_err(|(err, _)| err)?;
            }
            Queue::Nats {
                context, stream, ..
            } => {
                context
                    .publish(format!("{stream}.events"), payload.into())
                    .await?
                    .await?;
            }
            Queue::Rabbit { channel, queue, .. } => {
                channel
                    .basic_publish(
                        "".into(),
                        queue.as_str().into(),
                        lapin::options::BasicPublishOptions::default(),
                        &payload,
                        lapin::BasicProperties::default().with_delivery_mode(2),
                    )
                    .await?
                    .await?;
            }
        }
        Ok(())
    }
}

/// Event `n`: an OrderPaid of one of 1,000 orders (the keys figures' keys).
fn payload(n: usize) -> Vec<u8> {
    let order = n % 1_000;
    format!(r#"{{"id":"evt_{n}","type":"OrderPaid","order":{order}}}"#).into_bytes()
}
