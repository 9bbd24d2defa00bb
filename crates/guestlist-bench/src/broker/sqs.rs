//! SQS's own figures: the raw loop a user writes with the SDK and no inbox (`baseline`), and
//! the local server's floor (`broker_only`: receive and delete, no database at all).
//!
//! The local server (moto) scans a queue's every message on each receive: its cost, not the
//! consumer's, bounds every SQS figure, and `broker_only` measures it.

use guestlist::sqlx::PgPool;

use super::queues::Queue;
use super::work;

/// Receives ten at a time until `events` are done: with `pool`, each ten's work on one
/// transaction, committed before one `DeleteMessageBatch`; without, just the delete.
pub(super) async fn drain(
    queue: &Queue,
    pool: Option<&PgPool>,
    events: usize,
) -> anyhow::Result<()> {
    let Queue::Sqs { client, url, .. } = queue else {
        anyhow::bail!("the SQS loop runs on an SQS queue");
    };
    let mut done = 0;
    while done < events {
        let messages = client
            .receive_message()
            .queue_url(url)
            .max_number_of_messages(10)
            .wait_time_seconds(1)
            .send()
            .await?
            .messages
            .unwrap_or_default();
        if messages.is_empty() {
            continue;
        }
        if let Some(pool) = pool {
            let mut tx = pool.begin().await?;
            for message in &messages {
                let event: serde_json::Value =
                    serde_json::from_str(message.body.as_deref().unwrap_or_default())?;
                work(&mut tx, event["id"].as_str().unwrap_or_default()).await?;
            }
            tx.commit().await?;
        }
        let entries = messages
            .iter()
            .enumerate()
            .map(|(n, message)| {
                guestlist_sqs::aws_sdk_sqs::types::DeleteMessageBatchRequestEntry::builder()
                    .id(n.to_string())
                    .set_receipt_handle(message.receipt_handle.clone())
                    .build()
            })
            .collect::<Result<Vec<_>, _>>()?;
        let deleted = client
            .delete_message_batch()
            .queue_url(url)
            .set_entries(Some(entries))
            .send()
            .await?;
        anyhow::ensure!(
            deleted.failed.is_empty(),
            "SQS did not delete: {:?}",
            deleted.failed
        );
        done += messages.len();
    }
    Ok(())
}
