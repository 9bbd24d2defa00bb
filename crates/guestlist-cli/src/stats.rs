//! `guestlist stats`: the key table's figures, and the inbox's and the outbox's when there are
//! ones.

use clap::Args;
use guestlist::{Backend, Inbox, Outbox, inbox::InboxStats, outbox::OutboxStats};

use crate::database::{self, with_pool};
use crate::figures::{age, mib, size};
use crate::keys::{self, KeyTableArgs};

#[derive(Debug, Args)]
pub(crate) struct StatsArgs {
    #[command(flatten)]
    table: KeyTableArgs,
    /// The inbox table, shown when it exists.
    #[arg(long, default_value = "guestlist_inbox")]
    inbox_table: String,
    /// The outbox table, shown when it exists.
    #[arg(long, default_value = "guestlist_outbox")]
    outbox_table: String,
}

pub(crate) async fn run(args: StatsArgs) -> anyhow::Result<()> {
    if database::is_redis(&args.table.database) {
        return keys::print_stats(&args.table).await;
    }
    let keys = keys::print_stats(&args.table).await;
    let pool = database::connect_existing(&args.table.database, 1).await?;
    let inbox = optional(with_pool!(pool.clone(), |pool| read_inbox(
        &pool,
        &args.inbox_table
    )
    .await))?;
    let outbox = optional(with_pool!(pool, |pool| read_outbox(
        &pool,
        &args.outbox_table
    )
    .await))?;
    let mut shown = match keys {
        Ok(()) => true,
        // No key table here: the other tables' figures are the answer, if there are any.
        Err(err) if missing_table(&err) && (inbox.is_some() || outbox.is_some()) => false,
        Err(err) => return Err(err),
    };
    if let Some(inbox) = inbox {
        if shown {
            println!();
        }
        print_inbox(&args, &inbox);
        shown = true;
    }
    if let Some(outbox) = outbox {
        if shown {
            println!();
        }
        print_outbox(&args, &outbox);
    }
    Ok(())
}

/// A table's figures, or `None` when the table does not exist.
pub(crate) fn optional<T>(read: anyhow::Result<T>) -> anyhow::Result<Option<T>> {
    match read {
        Err(err) if missing_table(&err) => Ok(None),
        other => other.map(Some),
    }
}

/// The inbox's figures (`guestlist stats`, the console).
pub(crate) async fn read_inbox<DB: Backend>(
    pool: &guestlist::sqlx::Pool<DB>,
    table: &str,
) -> anyhow::Result<InboxStats> {
    Ok(Inbox::<DB>::with_table(table)?.stats(pool).await?)
}

/// The outbox's figures and its dead letters' count, `None` where it has no dead-letter table.
pub(crate) async fn read_outbox<DB: Backend>(
    pool: &guestlist::sqlx::Pool<DB>,
    table: &str,
) -> anyhow::Result<(OutboxStats, Option<u64>)> {
    let outbox = Outbox::<DB>::with_table(table)?;
    let stats = outbox.stats(pool).await?;
    // An outbox migrated before the dead letters had a table has none to count.
    let dead = outbox.dead_count(pool).await.ok();
    Ok((stats, dead))
}

/// Whether `err` says the table is not there.
pub(crate) fn missing_table(err: &anyhow::Error) -> bool {
    matches!(
        err.downcast_ref::<guestlist::Error>(),
        Some(guestlist::Error::MissingTable { .. })
    )
}

fn print_inbox(args: &StatsArgs, stats: &InboxStats) {
    println!("inbox      {}", args.inbox_table);
    println!("rows       {}", stats.rows);
    println!("oldest     {}", age(stats.oldest));
    let size = &stats.size;
    let per_row = stats
        .bytes_per_row()
        .map_or_else(String::new, |b| format!(", {b:.0} bytes a row"));
    println!(
        "size       table {}, indexes {}{per_row}",
        mib(size.table_bytes),
        mib(size.index_bytes)
    );
    if let Some(dead) = size.dead_rows {
        println!("dead rows  {dead} (purged, not yet vacuumed)");
    }
    if let Some(free) = size.free_bytes {
        let whose = if args.table.database.starts_with("sqlite") {
            "the database file's"
        } else {
            "the tablespace's"
        };
        println!("free       {} ({whose}, for reuse)", mib(Some(free)));
    }
    for handler in &stats.handlers {
        let rows = if handler.rows == 1 { "row" } else { "rows" };
        println!(
            "handler    {}: {} {rows}, oldest {}",
            handler.handler,
            handler.rows,
            age(handler.oldest)
        );
    }
}

fn print_outbox(args: &StatsArgs, (stats, dead): &(OutboxStats, Option<u64>)) {
    println!("outbox     {}", args.outbox_table);
    println!("rows       {}", stats.rows);
    println!("pending    {}", stats.pending);
    match dead {
        Some(dead) => println!("dead       {dead} (guestlist outbox dead list)"),
        None => println!(
            "dead       - (no {}_dead table: run guestlist migrate --outbox)",
            args.outbox_table
        ),
    }
    println!("oldest     {} (pending)", age(stats.oldest_pending));
    let count = stats.shard_count();
    let mut holding = stats.relays.iter().filter(|relay| !relay.shards.is_empty());
    if holding.clone().next().is_none() {
        println!("relay      none holds a shard ({count} shards)");
    }
    for relay in holding.by_ref() {
        let shards: Vec<String> = relay.shards.iter().map(u32::to_string).collect();
        println!(
            "relay      {} holds {} of {count} shards ({}), {} pending, lag {}",
            relay.holder,
            relay.shards.len(),
            shards.join(" "),
            relay.pending,
            age(relay.oldest_pending)
        );
    }
    let waiting = stats.relays.iter().filter(|relay| relay.shards.is_empty());
    for relay in waiting {
        println!(
            "relay      {} runs and holds no shard yet (or stands by)",
            relay.holder
        );
    }
    let unheld = stats.unheld();
    if !unheld.is_empty() && unheld.len() < stats.shards.len() {
        let list: Vec<String> = unheld.iter().map(u32::to_string).collect();
        println!(
            "unheld     shards {} (their leases ran out: a running relay takes them within a poll)",
            list.join(" ")
        );
    }
    println!("size       {}", size(stats.bytes, &args.table.database));
}
