//! Amazon SQS: the FIFO queue `ORDERS.fifo` (each order's events in one message group), its
//! dead letters in `ORDERS-dead.fifo`, the warehouse's own events in `ORDERS-picks.fifo`.
//! `sqs://host:port` is a local SQS (moto, LocalStack, ElasticMQ) with dummy credentials;
//! `sqs://aws` is AWS, configured from the environment (`AWS_REGION`, `AWS_PROFILE`…).

use anyhow::Context as _;
use guestlist::sqs::aws_sdk_sqs::error::DisplayErrorContext;
use guestlist::sqs::aws_sdk_sqs::types::{DeleteMessageBatchRequestEntry, QueueAttributeName};
use guestlist::sqs::{Client, SqsPublisher, SqsSource};

use super::Orders;
use crate::warehouse::OrderPaid;

/// How long a message received and neither deleted nor kept alive stays hidden (a warehouse
/// that died holding it): short, so that another warehouse gets it soon. A warehouse at work
/// keeps what it holds hidden for as long as it needs.
const VISIBILITY_SECONDS: &str = "10";

/// Creates the three FIFO queues where missing.
pub(super) async fn declare(orders: &Orders) -> anyhow::Result<()> {
    let client = client(orders).await;
    for queue in queues(orders) {
        client
            .create_queue()
            .queue_name(&queue)
            .attributes(QueueAttributeName::FifoQueue, "true")
            .attributes(QueueAttributeName::VisibilityTimeout, VISIBILITY_SECONDS)
            .send()
            .await
            .map_err(|err| anyhow::anyhow!("{}", DisplayErrorContext(err)))
            .with_context(|| format!("creating SQS queue {queue} at {}", orders.url))?;
    }
    Ok(())
}

/// Deletes the three queues, where present.
pub(super) async fn remove(orders: &Orders) -> anyhow::Result<()> {
    let client = client(orders).await;
    for queue in queues(orders) {
        // A queue that is not there has no URL; that is what we want anyway.
        if let Ok(found) = client.get_queue_url().queue_name(&queue).send().await {
            let _ = client
                .delete_queue()
                .set_queue_url(found.queue_url)
                .send()
                .await;
        }
    }
    Ok(())
}

/// Sends `payload` in its order's message group, deduplicated by its id (or its bytes).
pub(super) async fn publish(
    orders: &Orders,
    event: &OrderPaid,
    payload: Vec<u8>,
) -> anyhow::Result<()> {
    let client = client(orders).await;
    let url = url_of(&client, &orders.paid_topic()).await?;
    let dedup = match &event.id {
        Some(id) => id.clone(),
        None => guestlist::MessageId::from_raw_bytes(&payload)
            .as_str()
            .replace(':', "-"),
    };
    client
        .send_message()
        .queue_url(url)
        .message_body(String::from_utf8(payload)?)
        .message_group_id(event.order.to_string())
        .message_deduplication_id(dedup)
        .send()
        .await
        .map_err(|err| anyhow::anyhow!("{}", DisplayErrorContext(err)))
        .context("SQS did not take the event")?;
    Ok(())
}

/// Messages waiting or in flight in `ORDERS.fifo`, and dead letters.
pub(super) async fn left_over(orders: &Orders) -> anyhow::Result<Vec<String>> {
    let client = client(orders).await;
    let mut left = Vec::new();
    for (queue, what) in [
        (orders.paid_topic(), "waiting or in flight"),
        (orders.dead_letters(), "dead letters"),
    ] {
        let url = url_of(&client, &queue).await?;
        let attributes = client
            .get_queue_attributes()
            .queue_url(url)
            .attribute_names(QueueAttributeName::ApproximateNumberOfMessages)
            .attribute_names(QueueAttributeName::ApproximateNumberOfMessagesNotVisible)
            .send()
            .await
            .map_err(|err| anyhow::anyhow!("{}", DisplayErrorContext(err)))?;
        let count: u64 = attributes
            .attributes()
            .into_iter()
            .flatten()
            .filter_map(|(_, value)| value.parse::<u64>().ok())
            .sum();
        if count > 0 {
            left.push(format!("{count} {what} in {queue}"));
        }
    }
    Ok(left)
}

/// The body of every message in `ORDERS-picks.fifo`, taken off the queue (received and
/// deleted) until none is left visible.
pub(super) async fn picks(orders: &Orders) -> anyhow::Result<Vec<Vec<u8>>> {
    let client = client(orders).await;
    let url = url_of(&client, &orders.picks()).await?;
    let mut picks = Vec::new();
    loop {
        let received = client
            .receive_message()
            .queue_url(&url)
            .max_number_of_messages(10)
            .send()
            .await
            .map_err(|err| anyhow::anyhow!("{}", DisplayErrorContext(err)))?;
        let messages = received.messages.unwrap_or_default();
        if messages.is_empty() {
            return Ok(picks);
        }
        let mut delete = client.delete_message_batch().queue_url(&url);
        for (n, message) in messages.into_iter().enumerate() {
            let entry = DeleteMessageBatchRequestEntry::builder()
                .id(n.to_string())
                .set_receipt_handle(message.receipt_handle)
                .build()?;
            delete = delete.entries(entry);
            picks.push(message.body.unwrap_or_default().into_bytes());
        }
        delete
            .send()
            .await
            .map_err(|err| anyhow::anyhow!("{}", DisplayErrorContext(err)))?;
    }
}

/// A consumer of `ORDERS.fifo`, dead-lettering to `ORDERS-dead.fifo`.
pub(super) async fn source(orders: &Orders) -> anyhow::Result<SqsSource> {
    Ok(SqsSource::builder(&orders.paid_topic())
        .client(client(orders).await)
        .dead_letter(&orders.dead_letters())
        .connect()
        .await?)
}

/// The relay's publisher: each topic is a queue's name.
pub(super) async fn publisher(orders: &Orders) -> anyhow::Result<SqsPublisher> {
    Ok(SqsPublisher::builder()
        .client(client(orders).await)
        .connect()
        .await?)
}

fn queues(orders: &Orders) -> [String; 3] {
    [orders.paid_topic(), orders.dead_letters(), orders.picks()]
}

async fn client(orders: &Orders) -> Client {
    match orders.sqs_endpoint() {
        Some(endpoint) => guestlist::sqs::local_client(&endpoint),
        None => guestlist::sqs::client(None).await,
    }
}

async fn url_of(client: &Client, queue: &str) -> anyhow::Result<String> {
    let found = client
        .get_queue_url()
        .queue_name(queue)
        .send()
        .await
        .map_err(|err| anyhow::anyhow!("{}", DisplayErrorContext(err)))
        .with_context(|| format!("looking up SQS queue {queue}"))?;
    Ok(found.queue_url.unwrap_or_default())
}
