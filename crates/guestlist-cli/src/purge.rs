//! `guestlist purge`: delete rows older than the retention, with a progress bar on a terminal.

use guestlist::{Backend, Inbox, Outbox, Retention, retention::Purged};
use indicatif::{ProgressBar, ProgressStyle};

use crate::cli::PurgeArgs;
use crate::database::{self, with_pool};

pub(crate) async fn run(args: PurgeArgs) -> anyhow::Result<()> {
    if args.dead {
        let pool = database::connect_existing(&args.db.database, 1).await?;
        return with_pool!(pool, |pool| purge_dead(&pool, &args).await);
    }
    // Refused before connecting: a purge shorter than the horizon re-opens the door to duplicates.
    let retention = Retention::new(args.older_than, args.horizon)?;
    let pool = database::connect_existing(&args.db.database, 1).await?;
    with_pool!(pool, |pool| purge(&pool, &args, retention).await)
}

async fn purge<DB: Backend>(
    pool: &guestlist::sqlx::Pool<DB>,
    args: &PurgeArgs,
    retention: Retention,
) -> anyhow::Result<()> {
    let (inbox, outbox);
    let (table, mut purge) = if args.outbox {
        outbox = Outbox::<DB>::with_table(&args.outbox_table)?;
        (outbox.table().to_string(), outbox.purge(retention))
    } else {
        inbox = Inbox::<DB>::with_table(&args.db.table)?;
        (inbox.table().to_string(), inbox.purge(retention))
    };
    let older_than = humantime::format_duration(args.older_than);
    if let Some(rows) = args.batch_size {
        purge = purge.batch_size(rows);
    }
    let candidates = purge.count(pool).await?;
    if args.dry_run {
        println!(
            "{candidates} rows of {table} are older than {older_than}; nothing deleted (dry run)"
        );
        return Ok(());
    }
    // Hidden when stderr is not a terminal, so logs and cron mails stay clean.
    let bar = ProgressBar::new(candidates).with_style(
        ProgressStyle::with_template("{bar:40} {pos}/{len} rows  {per_sec}  eta {eta}")
            .expect("a valid progress template"),
    );
    let outcome = purge
        .run_with_progress(pool, |deleted| bar.set_position(deleted))
        .await;
    bar.finish_and_clear();
    match outcome? {
        Purged::Deleted(rows) => {
            println!("purged {rows} rows older than {older_than} from {table}")
        }
        Purged::Busy => println!(
            "another purger is working on {table} right now; nothing deleted here — it will finish the job"
        ),
    }
    Ok(())
}

/// The inbox's dead letters recorded longer ago than `--older-than` (their own retention).
async fn purge_dead<DB: Backend>(
    pool: &guestlist::sqlx::Pool<DB>,
    args: &PurgeArgs,
) -> anyhow::Result<()> {
    let inbox = Inbox::<DB>::with_table(&args.db.table)?;
    let older_than = humantime::format_duration(args.older_than);
    if args.dry_run {
        let cutoff = std::time::SystemTime::now() - args.older_than;
        let old = inbox
            .dead_letters(pool, u32::MAX)
            .await?
            .into_iter()
            .filter(|l| l.at < cutoff && l.state != guestlist::inbox::DeadState::Retrying)
            .count();
        println!(
            "{old} dead letters of {}_dead are older than {older_than}; nothing deleted (dry run)",
            inbox.table()
        );
        return Ok(());
    }
    let purged = inbox.purge_dead(pool, args.older_than).await?;
    println!(
        "purged {purged} dead letters older than {older_than} from {}_dead",
        inbox.table()
    );
    Ok(())
}
