//! The consumer the demo kills with SIGKILL after its work and before its commit.

use guestlist::{HandlerName, Inbox, MessageId, Processed};

use super::payments;
use super::shop::{INBOX, Shop, pick};
use crate::cli::CrashConsumerArgs;
use crate::database::{self, with_pool};

/// What the consumer prints when its work is done and its commit has not happened; when it
/// charged, `: charged <id>` follows.
pub(super) const WORK_DONE: &str = "work done, not committed";

pub(crate) async fn run(args: CrashConsumerArgs) -> anyhow::Result<()> {
    // The event id goes into the demo's SQL text: accept only the demo's own kind of id.
    anyhow::ensure!(
        args.event
            .bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'_'),
        "the demo's events are named like evt_k1ll"
    );
    let event = MessageId::new(args.event)?;
    let pool = database::connect(&args.database, 1).await?;
    with_pool!(pool, |pool| work_then_hang(&pool, &event, args.payments)
        .await)
}

/// Handles `event` as the warehouse does (and charges through `payments`, if given), says so,
/// and hangs before the commit until it is killed.
async fn work_then_hang<DB: Shop>(
    pool: &guestlist::sqlx::Pool<DB>,
    event: &MessageId,
    payments: Option<String>,
) -> anyhow::Result<()> {
    let inbox = Inbox::<DB>::with_table(INBOX)?;
    let client = payments::client();
    let done = inbox
        .process(pool, &HandlerName::new("warehouse")?, event, async |tx| {
            pick::<DB>(tx, event).await?;
            let charged = match &payments {
                Some(url) => format!(": charged {}", payments::charge(&client, url, 1200).await?),
                None => String::new(),
            };
            println!("{WORK_DONE}{charged}");
            tokio::time::sleep(std::time::Duration::from_secs(600)).await;
            anyhow::Ok(())
        })
        .await;
    match done {
        Ok(Processed::Duplicate) => anyhow::bail!("the demo's crash chapters expect a fresh event"),
        Ok(Processed::Ran(())) => {
            anyhow::bail!("the demo should have killed this consumer before its commit")
        }
        Err(err) => anyhow::bail!("the consumer failed before the demo could kill it: {err}"),
    }
}
