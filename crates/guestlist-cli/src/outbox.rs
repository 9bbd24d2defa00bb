//! `guestlist outbox dead`: the outgoing dead letters, for the operator who fixes what the
//! broker refused (creates the queue, raises a limit) and puts the message back, or drops it.
//! `guestlist outbox shards`: how many relays can publish the table at once.

use clap::{Args, Subcommand};
use guestlist::{Backend, Outbox, outbox::DeadEdit};

use crate::body_text::body_text;

use crate::database::{self, DatabaseUrl, with_pool};

/// The outbox's commands.
#[derive(Debug, Subcommand)]
pub(crate) enum OutboxCommand {
    /// The outgoing dead letters: messages a broker refused for good, or too many times.
    #[command(subcommand)]
    Dead(DeadCommand),
    /// Show the table's shard count, or change it: at most that many relays publish at once,
    /// each on its share. Stop the relays first (SIGTERM gives their shards back at once).
    Shards(ShardsArgs),
}

#[derive(Debug, Args)]
pub(crate) struct ShardsArgs {
    #[command(flatten)]
    table: OutboxTableArgs,
    /// The new shard count (1 to 65536); without it, the count is shown.
    count: Option<u32>,
    /// How long to wait for shards still held (a killed relay's, until its lease ends).
    #[arg(long, value_parser = humantime::parse_duration, default_value = "30s")]
    wait: std::time::Duration,
}

/// What to do with the dead letters.
#[derive(Debug, Subcommand)]
pub(crate) enum DeadCommand {
    /// List them, oldest first, with why each was refused (never their bodies).
    List(ListArgs),
    /// Their failure groups: per topic, the refusals with ids, numbers and quoted values taken
    /// out, with how many and since when.
    Groups(ListArgs),
    /// One's headers and body (the first 64 KiB), to look at before a retry or an edit.
    Show(OneArgs),
    /// Put one (ID) or a group (--group G --confirm N) back in the outbox, to be published
    /// after what is pending now; one with --body, --header or --drop-header is edited first
    /// (marked `guestlist-edited-by`).
    Retry(RetryArgs),
    /// Delete one (ID) or a group (--group G --confirm N) for good.
    Drop(PickArgs),
}

/// Where the outbox is.
#[derive(Debug, Args)]
pub(crate) struct OutboxTableArgs {
    #[command(flatten)]
    database: DatabaseUrl,
    /// The outbox table; its dead letters are in `<table>_dead`.
    #[arg(long, default_value = "guestlist_outbox")]
    outbox_table: String,
}

#[derive(Debug, Args)]
pub(crate) struct ListArgs {
    #[command(flatten)]
    table: OutboxTableArgs,
    /// The most to list.
    #[arg(long, default_value_t = 100)]
    limit: u32,
}

#[derive(Debug, Args)]
pub(crate) struct OneArgs {
    #[command(flatten)]
    table: OutboxTableArgs,
    /// The dead letter's id, as `list` shows it.
    id: i64,
}

/// One dead letter, or a failure group of them.
#[derive(Debug, Args)]
pub(crate) struct PickArgs {
    #[command(flatten)]
    table: OutboxTableArgs,
    /// The dead letter's id, as `list` shows it.
    #[arg(required_unless_present = "group")]
    id: Option<i64>,
    /// A failure group, as `groups` names it.
    #[arg(long, conflicts_with = "id")]
    group: Option<String>,
    /// The group's size, as `groups` shows it: nothing is done unless it still holds exactly
    /// that many.
    #[arg(long, requires = "group")]
    confirm: Option<usize>,
}

#[derive(Debug, Args)]
pub(crate) struct RetryArgs {
    #[command(flatten)]
    one: PickArgs,
    /// Replace the body with this file's bytes (`-`: standard input).
    #[arg(long, value_name = "FILE", conflicts_with = "group")]
    body: Option<std::path::PathBuf>,
    /// Set a header (NAME=VALUE), in place of any of that name; repeat for several.
    #[arg(long = "header", value_name = "NAME=VALUE", conflicts_with = "group")]
    headers: Vec<String>,
    /// Remove a header; repeat for several.
    #[arg(long = "drop-header", value_name = "NAME", conflicts_with = "group")]
    drop_headers: Vec<String>,
    /// Who edits, recorded in the message's `guestlist-edited-by` header.
    #[arg(long, env = "USER", default_value = "cli")]
    by: String,
}

impl RetryArgs {
    /// The edit the flags ask for, if any.
    fn edit(&self) -> anyhow::Result<Option<DeadEdit>> {
        if self.body.is_none() && self.headers.is_empty() && self.drop_headers.is_empty() {
            return Ok(None);
        }
        let mut edit = DeadEdit::by(&self.by);
        if let Some(path) = &self.body {
            let body = if path.as_os_str() == "-" {
                let mut body = Vec::new();
                std::io::Read::read_to_end(&mut std::io::stdin(), &mut body)?;
                body
            } else {
                std::fs::read(path).map_err(|err| {
                    anyhow::anyhow!("cannot read the new body from {}: {err}", path.display())
                })?
            };
            edit = edit.body(body);
        }
        for header in &self.headers {
            let Some((name, value)) = header.split_once('=') else {
                anyhow::bail!("--header {header:?}: write it NAME=VALUE");
            };
            anyhow::ensure!(
                !name.trim().is_empty(),
                "--header {header:?}: the name is empty"
            );
            edit = edit.header(name.trim(), value);
        }
        for name in &self.drop_headers {
            edit = edit.without_header(name);
        }
        Ok(Some(edit))
    }
}

pub(crate) async fn run(command: OutboxCommand) -> anyhow::Result<()> {
    let command = match command {
        OutboxCommand::Dead(command) => command,
        OutboxCommand::Shards(args) => {
            let pool = database::connect_existing(&args.table.database, 1).await?;
            return with_pool!(pool, |pool| shards(pool, &args).await);
        }
    };
    let table = match &command {
        DeadCommand::List(args) | DeadCommand::Groups(args) => &args.table,
        DeadCommand::Show(args) => &args.table,
        DeadCommand::Drop(args) => &args.table,
        DeadCommand::Retry(args) => &args.one.table,
    };
    let pool = database::connect_existing(&table.database, 1).await?;
    with_pool!(pool, |pool| dead(pool, &command).await)
}

async fn dead<DB: Backend>(
    pool: guestlist::sqlx::Pool<DB>,
    command: &DeadCommand,
) -> anyhow::Result<()> {
    match command {
        DeadCommand::List(args) => {
            let outbox = Outbox::<DB>::with_table(&args.table.outbox_table)?;
            let letters = outbox.dead_letters(&pool, args.limit).await?;
            if letters.is_empty() {
                println!("no dead letters in {}_dead", outbox.table());
            }
            for letter in letters {
                println!(
                    "{}  {}  topic {}  key {}  seq {}  {} bytes  {} ago\n    {}",
                    letter.id,
                    letter.message_id,
                    letter.topic,
                    letter.ordering_key.as_deref().unwrap_or("-"),
                    letter.seq,
                    letter.payload_bytes,
                    humantime::format_duration(std::time::Duration::from_secs(
                        letter.age.as_secs()
                    )),
                    letter.reason
                );
            }
        }
        DeadCommand::Show(args) => {
            let outbox = Outbox::<DB>::with_table(&args.table.outbox_table)?;
            let Some((headers, body)) = outbox.dead_letter_message(&pool, args.id).await? else {
                anyhow::bail!(
                    "no dead letter {} in {}_dead: see `guestlist outbox dead list`",
                    args.id,
                    outbox.table()
                );
            };
            for (name, value) in &headers {
                println!("header  {name}: {}", body_text(value.as_bytes()));
            }
            let shown = &body[..body.len().min(64 * 1024)];
            println!("body    {} bytes:\n{}", body.len(), body_text(shown));
        }
        DeadCommand::Groups(args) => {
            let outbox = Outbox::<DB>::with_table(&args.table.outbox_table)?;
            let groups = outbox.dead_groups(&pool, args.limit).await?;
            if groups.is_empty() {
                println!("no dead letters in {}_dead", outbox.table());
            }
            for group in &groups {
                println!(
                    "group {}  {}  {} dead letters  first {} ago, last {} ago\n    {}\n    e.g. {}",
                    group.id,
                    group.topic,
                    group.count(),
                    whole_seconds(group.first_age),
                    whole_seconds(group.last_age),
                    group.class,
                    group.example
                );
            }
        }
        DeadCommand::Retry(args) => {
            let outbox = Outbox::<DB>::with_table(&args.one.table.outbox_table)?;
            let edit = args.edit()?;
            for id in picked(&outbox, &pool, &args.one).await? {
                let back = match &edit {
                    Some(edit) => outbox.retry_dead_edited(&pool, id, edit).await?,
                    None => outbox.retry_dead(&pool, id).await?,
                };
                if !back {
                    anyhow::bail!(
                        "no dead letter {id} in {}_dead: see `guestlist outbox dead list`",
                        outbox.table()
                    );
                }
                let edited = if edit.is_some() { ", edited," } else { "" };
                println!(
                    "dead letter {id} is back{edited} in {}: the relay publishes it after what is pending",
                    outbox.table()
                );
            }
        }
        DeadCommand::Drop(args) => {
            let outbox = Outbox::<DB>::with_table(&args.table.outbox_table)?;
            for id in picked(&outbox, &pool, args).await? {
                if !outbox.drop_dead(&pool, id).await? {
                    anyhow::bail!(
                        "no dead letter {id} in {}_dead: see `guestlist outbox dead list`",
                        outbox.table()
                    );
                }
                println!("dead letter {id} dropped");
            }
        }
    }
    Ok(())
}

/// The dead letters `pick` names: one, or a whole group whose size the operator confirmed.
async fn picked<DB: Backend>(
    outbox: &Outbox<DB>,
    pool: &guestlist::sqlx::Pool<DB>,
    pick: &PickArgs,
) -> anyhow::Result<Vec<i64>> {
    let Some(name) = &pick.group else {
        let Some(id) = pick.id else {
            anyhow::bail!("name a dead letter (ID) or a group (--group G)");
        };
        return Ok(vec![id]);
    };
    let groups = outbox.dead_groups(pool, 100_000).await?;
    let Some(group) = groups.iter().find(|g| &g.id == name) else {
        anyhow::bail!(
            "no failure group {name} among the dead letters: see `guestlist outbox dead groups`"
        );
    };
    let count = group.count();
    crate::inbox_dead::confirmed(&group.id, count, &group.topic, &group.class, pick.confirm)?;
    Ok(group.ids.clone())
}

/// `age` to the second, as a person reads it.
fn whole_seconds(age: std::time::Duration) -> humantime::FormattedDuration {
    humantime::format_duration(std::time::Duration::from_secs(age.as_secs()))
}

async fn shards<DB: Backend>(
    pool: guestlist::sqlx::Pool<DB>,
    args: &ShardsArgs,
) -> anyhow::Result<()> {
    let outbox = Outbox::<DB>::with_table(&args.table.outbox_table)?;
    let Some(count) = args.count else {
        let count = outbox.shard_count(&pool).await?;
        println!(
            "{} has {count} shards: up to {count} relays publish it at once",
            outbox.table()
        );
        return Ok(());
    };
    anyhow::ensure!(
        (1..=65_536).contains(&count),
        "a shard count is 1 to 65536, not {count}"
    );
    outbox.set_shards(&pool, count, args.wait).await?;
    println!(
        "{} has {count} shards now: start the relays again",
        outbox.table()
    );
    Ok(())
}
