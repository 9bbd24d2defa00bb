//! `guestlist stats`: the key table's figures, and the outbox's when there is one.

use std::time::Duration;

use clap::Args;
use guestlist::{Backend, Outbox, OutboxStats};

use crate::database::{self, with_pool};
use crate::keys::{self, KeyTableArgs};

#[derive(Debug, Args)]
pub(crate) struct StatsArgs {
    #[command(flatten)]
    table: KeyTableArgs,
    /// The outbox table, shown when it exists.
    #[arg(long, default_value = "guestlist_outbox")]
    outbox_table: String,
}

pub(crate) async fn run(args: StatsArgs) -> anyhow::Result<()> {
    if database::is_redis(&args.table.database) {
        return keys::print_stats(&args.table).await;
    }
    let keys = keys::print_stats(&args.table).await;
    let outbox = outbox_stats(&args.table.database, &args.outbox_table).await?;
    match (keys, outbox) {
        (Ok(()), None) => Ok(()),
        (Ok(()), Some(outbox)) => {
            println!();
            print_outbox(&args, &outbox);
            Ok(())
        }
        // Only an outbox here: its figures are the answer.
        (Err(err), Some(outbox)) if missing_table(&err) => {
            print_outbox(&args, &outbox);
            Ok(())
        }
        (Err(err), _) => Err(err),
    }
}

/// The outbox's figures, or `None` when the table does not exist.
async fn outbox_stats(url: &str, table: &str) -> anyhow::Result<Option<OutboxStats>> {
    let pool = database::connect(url, 1).await?;
    let read = with_pool!(pool, |pool| read_outbox(&pool, table).await);
    match read {
        Err(err) if missing_table(&err) => Ok(None),
        other => other.map(Some),
    }
}

async fn read_outbox<DB: Backend>(
    pool: &guestlist::sqlx::Pool<DB>,
    table: &str,
) -> anyhow::Result<OutboxStats> {
    Ok(Outbox::<DB>::with_table(table)?.stats(pool).await?)
}

fn missing_table(err: &anyhow::Error) -> bool {
    matches!(
        err.downcast_ref::<guestlist::Error>(),
        Some(guestlist::Error::MissingTable { .. })
    )
}

fn print_outbox(args: &StatsArgs, stats: &OutboxStats) {
    println!("outbox     {}", args.outbox_table);
    println!("rows       {}", stats.rows);
    println!("pending    {}", stats.pending);
    println!("oldest     {} (pending)", age(stats.oldest_pending));
    let relay = match (&stats.lease.holder, stats.lease.expires_in) {
        (Some(holder), Some(left)) => {
            format!("{holder} holds the lease ({} left)", age(Some(left)))
        }
        (Some(holder), None) => format!("none: {holder}'s lease expired"),
        (None, _) => "none holds the lease".to_owned(),
    };
    println!("relay      {relay}");
    println!("size       {}", size(stats.bytes, &args.table.database));
}

/// An age for people, in whole seconds; `-` when there is none.
pub(crate) fn age(age: Option<Duration>) -> String {
    age.map_or_else(
        || "-".to_owned(),
        |age| humantime::format_duration(Duration::from_secs(age.as_secs())).to_string(),
    )
}

/// A table's size for people, saying what the figure covers on `url`'s database.
pub(crate) fn size(bytes: Option<u64>, url: &str) -> String {
    let figure = bytes.map_or_else(
        || "-".to_owned(),
        |b| format!("{:.1} MiB", b as f64 / 1048576.0),
    );
    let covers = if url.starts_with("sqlite") {
        " (the whole database file)"
    } else if database::is_redis(url) {
        " (in memory)"
    } else {
        ""
    };
    format!("{figure}{covers}")
}
