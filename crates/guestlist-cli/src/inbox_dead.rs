//! `guestlist inbox dead`: the incoming dead letters (messages a consumer's handler gave up
//! on), for the operator who fixes the cause and puts them back, one at a time or a failure
//! group at once, or drops them.

use std::time::{Duration, SystemTime};

use clap::{Args, Subcommand};
use guestlist::inbox::{DeadRetry, IncomingDeadLetter};
use guestlist::{Backend, Inbox, outbox::Publish};

use crate::body_text::body_text;
use crate::broker::{BrokerArgs, with_publisher};
use crate::database::{self, DatabaseUrl, with_pool};

/// The inbox's commands.
#[derive(Debug, Subcommand)]
pub(crate) enum InboxCommand {
    /// The incoming dead letters: messages a handler gave up on (poison, or deferred too long).
    #[command(subcommand)]
    Dead(DeadCommand),
}

/// What to do with the incoming dead letters.
#[derive(Debug, Subcommand)]
pub(crate) enum DeadCommand {
    /// List them, the newest first: handler, id, state, why, and the body's first bytes.
    List(ListArgs),
    /// Their failure groups: per handler, the reasons with ids, numbers and quoted values taken
    /// out, with how many and since when.
    Groups(ListArgs),
    /// One, whole: its headers and body (the first 64 KiB), where it goes back, its retries.
    Show(OneArgs),
    /// Put one (HANDLER ID) or a group (--group G --confirm N) back on the handler's source:
    /// its handler alone runs it, once, under its own id.
    Retry(RetryArgs),
    /// Delete one (HANDLER ID) or a group (--group G --confirm N) for good; the broker's own
    /// dead-letter place keeps its copy.
    Drop(PickArgs),
}

/// Where the inbox is.
#[derive(Debug, Args)]
pub(crate) struct InboxTableArgs {
    #[command(flatten)]
    database: DatabaseUrl,
    /// The inbox table; its dead letters are in `<table>_dead`.
    #[arg(long, default_value = "guestlist_inbox")]
    table: String,
}

#[derive(Debug, Args)]
pub(crate) struct ListArgs {
    #[command(flatten)]
    inbox: InboxTableArgs,
    /// The most dead letters read.
    #[arg(long, default_value_t = 1000)]
    limit: u32,
}

#[derive(Debug, Args)]
pub(crate) struct OneArgs {
    #[command(flatten)]
    inbox: InboxTableArgs,
    /// The handler that gave up on it.
    handler: String,
    /// Its message id.
    id: String,
}

/// One dead letter, or a group of them.
#[derive(Debug, Args)]
pub(crate) struct PickArgs {
    #[command(flatten)]
    inbox: InboxTableArgs,
    /// The handler that gave up on it.
    #[arg(required_unless_present = "group", requires = "id")]
    handler: Option<String>,
    /// Its message id.
    #[arg(conflicts_with = "group")]
    id: Option<String>,
    /// A failure group, as `groups` names it.
    #[arg(long)]
    group: Option<String>,
    /// The group's size, as `groups` shows it: nothing is done unless it still holds exactly
    /// that many.
    #[arg(long, requires = "group")]
    confirm: Option<usize>,
}

#[derive(Debug, Args)]
pub(crate) struct RetryArgs {
    #[command(flatten)]
    pick: PickArgs,
    #[command(flatten)]
    broker: BrokerArgs,
    /// Who retries, recorded with each retry.
    #[arg(long, env = "USER", default_value = "cli")]
    by: String,
}

/// The most of a body `show` prints.
const SHOWN_BYTES: usize = 64 * 1024;

pub(crate) async fn run(command: InboxCommand) -> anyhow::Result<()> {
    let InboxCommand::Dead(command) = command;
    if let DeadCommand::Retry(args) = &command {
        // Which broker, before anything is opened: a missing one is the first thing to hear.
        args.broker.broker("")?;
    }
    let inbox = match &command {
        DeadCommand::List(args) | DeadCommand::Groups(args) => &args.inbox,
        DeadCommand::Show(args) => &args.inbox,
        DeadCommand::Retry(args) => &args.pick.inbox,
        DeadCommand::Drop(args) => &args.inbox,
    };
    let pool = database::connect_existing(&inbox.database, 1).await?;
    with_pool!(pool, |pool| dead(pool, &command).await)
}

async fn dead<DB: Backend>(
    pool: guestlist::sqlx::Pool<DB>,
    command: &DeadCommand,
) -> anyhow::Result<()> {
    match command {
        DeadCommand::List(args) => {
            let inbox = Inbox::<DB>::with_table(&args.inbox.table)?;
            let letters = inbox.dead_letters(&pool, args.limit).await?;
            if letters.is_empty() {
                println!("no dead letters in {}_dead", inbox.table());
            }
            for letter in &letters {
                print_listed(letter);
            }
        }
        DeadCommand::Groups(args) => {
            let inbox = Inbox::<DB>::with_table(&args.inbox.table)?;
            let groups = inbox.dead_groups(&pool, args.limit).await?;
            if groups.is_empty() {
                println!("no dead letters waiting in {}_dead", inbox.table());
            }
            for group in &groups {
                println!(
                    "group {}  {}  {} dead letters  first {} ago, last {} ago\n    {}\n    e.g. {}",
                    group.id,
                    group.handler,
                    group.count(),
                    ago(group.first_at),
                    ago(group.last_at),
                    group.class,
                    group.example
                );
            }
        }
        DeadCommand::Show(args) => {
            let inbox = Inbox::<DB>::with_table(&args.inbox.table)?;
            let letter = inbox
                .dead_letter(&pool, &args.handler, &args.id)
                .await?
                .ok_or_else(|| missing(&args.handler, &args.id))?;
            print_whole(&letter);
        }
        DeadCommand::Retry(args) => {
            let inbox = Inbox::<DB>::with_table(&args.pick.inbox.table)?;
            let picked = picked(&inbox, &pool, &args.pick).await?;
            let broker = args.broker.broker("")?;
            with_publisher!(broker, |publisher| {
                retry_all(&inbox, &pool, &publisher, &picked, &args.by).await
            }, unused: picked)?;
        }
        DeadCommand::Drop(args) => {
            let inbox = Inbox::<DB>::with_table(&args.inbox.table)?;
            for (handler, id) in picked(&inbox, &pool, args).await? {
                if inbox.drop_dead(&pool, &handler, &id).await? {
                    println!("dropped {handler} {id}");
                } else {
                    println!("{handler} {id}: gone already");
                }
            }
        }
    }
    Ok(())
}

/// The dead letters `pick` names, as (handler, id): one, or a whole group whose size the
/// operator confirmed.
async fn picked<DB: Backend>(
    inbox: &Inbox<DB>,
    pool: &guestlist::sqlx::Pool<DB>,
    pick: &PickArgs,
) -> anyhow::Result<Vec<(String, String)>> {
    let Some(name) = &pick.group else {
        let (Some(handler), Some(id)) = (&pick.handler, &pick.id) else {
            anyhow::bail!("name a dead letter (HANDLER ID) or a group (--group G)");
        };
        return Ok(vec![(handler.clone(), id.clone())]);
    };
    let groups = inbox.dead_groups(pool, 100_000).await?;
    let Some(group) = groups.iter().find(|g| &g.id == name) else {
        anyhow::bail!(
            "no failure group {name} among the dead letters waiting: see `guestlist inbox dead groups`"
        );
    };
    confirmed(
        &group.id,
        group.count(),
        &group.handler,
        &group.class,
        pick.confirm,
    )?;
    Ok(group
        .message_ids
        .iter()
        .map(|id| (group.handler.clone(), id.clone()))
        .collect())
}

/// Whether the operator confirmed the size of the group `id` (`count` dead letters of
/// `owner`, a handler or a topic, failing as `class`) as it is now.
pub(crate) fn confirmed(
    id: &str,
    count: usize,
    owner: &str,
    class: &str,
    confirm: Option<usize>,
) -> anyhow::Result<()> {
    match confirm {
        Some(n) if n == count => Ok(()),
        Some(n) => anyhow::bail!(
            "group {id} holds {count} dead letters now, not {n}: look at the groups again and \
             confirm the count they show"
        ),
        None => anyhow::bail!(
            "group {id} holds {count} dead letters of {owner} ({class}): to act on all of them, \
             run this again with --confirm {count}"
        ),
    }
}

#[cfg_attr(
    not(any(feature = "nats", feature = "amqp", feature = "kafka", feature = "sqs")),
    allow(dead_code)
)]
async fn retry_all<DB: Backend, P: Publish>(
    inbox: &Inbox<DB>,
    pool: &guestlist::sqlx::Pool<DB>,
    publisher: &P,
    picked: &[(String, String)],
    by: &str,
) -> anyhow::Result<()> {
    let mut failed = 0;
    for (handler, id) in picked {
        match inbox.retry_dead(pool, publisher, handler, id, by).await {
            Ok(DeadRetry::Retried { retry }) => {
                println!("retried {handler} {id} (retry {retry}): its handler runs it once");
            }
            Ok(DeadRetry::AlreadyRetried) => println!("{handler} {id}: retried already"),
            Ok(DeadRetry::NotFound) => {
                failed += 1;
                eprintln!("{}", missing(handler, id));
            }
            Ok(DeadRetry::NoCopy) => {
                failed += 1;
                eprintln!(
                    "{handler} {id}: no copy was kept (its body was over 4 MiB, or it was \
                     recorded before copies were): replay it from the broker's dead-letter \
                     place with the broker's tools"
                );
            }
            Ok(other) => eprintln!("{handler} {id}: {other:?}"),
            Err(err) => {
                failed += 1;
                eprintln!(
                    "{handler} {id}: {err}; it stays 'retrying': run the retry again once the \
                     broker takes it"
                );
            }
        }
    }
    anyhow::ensure!(failed == 0, "{failed} of {} not retried", picked.len());
    Ok(())
}

fn missing(handler: &str, id: &str) -> anyhow::Error {
    anyhow::anyhow!(
        "no dead letter {id} of {handler}: see `guestlist inbox dead list` for their handlers \
         and ids"
    )
}

fn print_listed(letter: &IncomingDeadLetter) {
    let body = match letter.body_bytes {
        Some(bytes) => format!("{bytes} bytes: {}", body_text(&letter.preview)),
        None => "no copy kept".to_owned(),
    };
    println!(
        "{}  {}  {}{}  {} deliveries  {} ago  group {}\n    {}\n    {body}",
        letter.handler,
        letter.message_id,
        letter.state.as_str(),
        retried(letter),
        letter.deliveries,
        ago(letter.at),
        letter.group(),
        letter.reason,
    );
}

fn print_whole(letter: &IncomingDeadLetter) {
    println!("handler     {}", letter.handler);
    println!("message id  {}", letter.message_id);
    println!("state       {}{}", letter.state.as_str(), retried(letter));
    println!("reason      {}", letter.reason);
    println!("group       {} ({})", letter.group(), letter.class());
    println!("deliveries  {}", letter.deliveries);
    println!("dead since  {} ago", ago(letter.at));
    println!(
        "goes back   {}",
        letter
            .topic
            .as_deref()
            .unwrap_or("- (cannot be retried from here)")
    );
    println!("key         {}", letter.key.as_deref().unwrap_or("-"));
    for (name, value) in &letter.headers {
        println!("header      {name}: {}", body_text(value.as_bytes()));
    }
    match &letter.body {
        Some(body) if body.len() > SHOWN_BYTES => println!(
            "body        {} bytes, the first {SHOWN_BYTES}:\n{}",
            body.len(),
            body_text(&body[..SHOWN_BYTES])
        ),
        Some(body) => println!("body        {} bytes:\n{}", body.len(), body_text(body)),
        None => {
            println!("body        no copy kept (over 4 MiB): see the broker's dead-letter place")
        }
    }
}

/// ", retried N times, last by B H ago" where it was.
fn retried(letter: &IncomingDeadLetter) -> String {
    match (&letter.retried_by, letter.retried_at) {
        (Some(by), Some(at)) if letter.retries > 0 => format!(
            " (retried {} time{}, last by {by} {} ago)",
            letter.retries,
            if letter.retries == 1 { "" } else { "s" },
            ago(at)
        ),
        _ => String::new(),
    }
}

fn ago(at: SystemTime) -> humantime::FormattedDuration {
    let age = SystemTime::now().duration_since(at).unwrap_or_default();
    humantime::format_duration(Duration::from_secs(age.as_secs()))
}
