//! The consumer the demo kills with SIGKILL after its work and before its commit.

use guestlist::{HandlerName, Inbox, MessageId};

use super::shop::{INBOX, Shop, pick};
use crate::cli::CrashConsumerArgs;
use crate::database::{self, with_pool};

/// What the consumer prints when its work is done and its commit has not happened.
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
    with_pool!(pool, |pool| work_then_hang(&pool, &event).await)
}

async fn work_then_hang<DB: Shop>(
    pool: &guestlist::sqlx::Pool<DB>,
    event: &MessageId,
) -> anyhow::Result<()> {
    let inbox = Inbox::<DB>::with_table(INBOX)?;
    let mut tx = pool.begin().await?;
    let claim = inbox
        .claim(&mut tx, &HandlerName::new("warehouse")?, event)
        .await?;
    anyhow::ensure!(
        claim.is_fresh(),
        "the demo's crash chapter expects a fresh event"
    );
    pick::<DB>(event)(&mut tx).await?;
    println!("{WORK_DONE}");
    tokio::time::sleep(std::time::Duration::from_secs(600)).await;
    anyhow::bail!("the demo should have killed this consumer before its commit")
}
