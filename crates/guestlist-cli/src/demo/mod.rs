//! `guestlist demo`: the warehouse story, played for real on a database.
//!
//! OrderPaid `evt_9f3k` is delivered five times; a second event follows; two consumers race one
//! duplicate; a consumer is killed with SIGKILL after its work and before its commit, and the
//! redelivery does the work once. Last, past the edge of the transaction: a consumer charges
//! through a payments service and is killed before its commit; the redelivery charges again
//! with the same carried key, and payments replays the first charge. Every effect is counted in
//! the database, not in memory.

pub(crate) mod crash;
mod payments;
mod report;
mod shop;

use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context;
use guestlist::sqlx::Pool;
use guestlist::{HandlerName, IdempotencyKey, Inbox, MessageId, Processed};
use tokio::sync::Barrier;

use self::report::Chapter;
use self::shop::Shop;
use crate::cli::{CRASH_CONSUMER_DATABASE_VAR, DemoArgs};
use crate::database::{self, AnyPool, Kind};

pub(crate) async fn run(args: DemoArgs) -> anyhow::Result<()> {
    let scratch;
    let url = match args.database {
        Some(url) => url,
        None => {
            scratch = tempfile::tempdir().context("cannot create a directory for the demo")?;
            format!(
                "sqlite:{}",
                scratch.path().join("guestlist-demo.db").display()
            )
        }
    };
    println!(
        "guestlist demo: the warehouse story on {} ({})\n",
        Kind::of(&url)?.name(),
        database::redact(&url)
    );
    let pool = database::connect(&url, 4).await?;
    let payments = database::connect(&payments_database(&url)?, 2).await?;
    let chapters = match (pool, payments) {
        (AnyPool::Postgres(pool), AnyPool::Postgres(payments)) => {
            story(&pool, payments, &url).await
        }
        (AnyPool::Sqlite(pool), AnyPool::Sqlite(payments)) => story(&pool, payments, &url).await,
        (AnyPool::MySql(pool), AnyPool::MySql(payments)) => story(&pool, payments, &url).await,
        _ => unreachable!("payments' database is of the warehouse's kind"),
    }?;
    report::print(&chapters);
    for note in chapters.iter().filter_map(|c| c.note.as_deref()) {
        println!("\n{note}");
    }
    let deliveries: u32 = chapters.iter().map(|c| c.deliveries).sum();
    let tasks: i64 = chapters.iter().map(|c| c.pick_tasks).sum();
    println!(
        "\n{deliveries} deliveries of {} events: {tasks} pick tasks, one per event.",
        chapters.len()
    );
    Ok(())
}

/// Where payments keeps its charges: on SQLite a file of its own beside the warehouse's (one
/// SQLite file has one writer, and the warehouse holds it while it calls payments), elsewhere
/// the same database.
fn payments_database(url: &str) -> anyhow::Result<String> {
    if Kind::of(url)? != Kind::Sqlite {
        return Ok(url.to_owned());
    }
    let file = url.trim_start_matches("sqlite:").trim_start_matches("//");
    let (file, query) = file.split_once('?').unwrap_or((file, ""));
    let path = std::path::Path::new(file);
    let stem = path
        .file_stem()
        .and_then(|s| s.to_str())
        .unwrap_or("guestlist");
    let sibling = match path.extension().and_then(|e| e.to_str()) {
        Some(ext) => path.with_file_name(format!("{stem}-payments.{ext}")),
        None => path.with_file_name(format!("{stem}-payments")),
    };
    let query = if query.is_empty() {
        String::new()
    } else {
        format!("?{query}")
    };
    Ok(format!("sqlite:{}{query}", sibling.display()))
}

async fn story<DB: Shop>(
    pool: &Pool<DB>,
    payments: Pool<DB>,
    url: &str,
) -> anyhow::Result<Vec<Chapter>> {
    let inbox = shop::open(pool).await?;
    let warehouse = HandlerName::new("warehouse")?;
    let ctx = Story {
        pool,
        inbox: &inbox,
        warehouse: &warehouse,
        payments_url: payments::serve(payments.clone()).await?,
        payments: &payments,
    };
    Ok(vec![
        ctx.redeliveries(&MessageId::new("evt_9f3k")?, 5).await?,
        ctx.redeliveries(&MessageId::new("evt_7h2m")?, 1).await?,
        ctx.race(&MessageId::new("evt_r4c3")?).await?,
        ctx.crash(&MessageId::new("evt_k1ll")?, url).await?,
        ctx.crash_after_charge(&MessageId::new("evt_ch4rge")?, url)
            .await?,
    ])
}

struct Story<'a, DB: Shop> {
    pool: &'a Pool<DB>,
    inbox: &'a Inbox<DB>,
    warehouse: &'a HandlerName,
    /// Where the payments service listens.
    payments_url: String,
    /// Its database.
    payments: &'a Pool<DB>,
}

impl<DB: Shop> Story<'_, DB> {
    /// One consumer receives `event` `times` times.
    async fn redeliveries(&self, event: &MessageId, times: u32) -> anyhow::Result<Chapter> {
        let mut committed = 0;
        for _ in 0..times {
            committed += u32::from(self.deliver(event).await?);
        }
        let story = if times == 1 {
            format!("a second event, {event}, delivered once")
        } else {
            format!("OrderPaid {event} delivered {times} times")
        };
        self.chapter(story, event, times, times, committed).await
    }

    /// Two consumers on two connections receive the same event at the same moment.
    async fn race(&self, event: &MessageId) -> anyhow::Result<Chapter> {
        let start = Arc::new(Barrier::new(2));
        let racers = (0..2).map(|_| {
            let (pool, inbox, warehouse, event, start) = (
                self.pool.clone(),
                self.inbox.clone(),
                self.warehouse.clone(),
                event.clone(),
                start.clone(),
            );
            tokio::spawn(async move {
                start.wait().await;
                inbox
                    .process(&pool, &warehouse, &event.clone(), async move |tx| {
                        shop::pick::<DB>(tx, &event).await
                    })
                    .await
            })
        });
        let mut committed = 0;
        for racer in racers.collect::<Vec<_>>() {
            committed += u32::from(racer.await??.ran());
        }
        self.chapter(
            format!("{event} reaches two consumers at once"),
            event,
            2,
            2,
            committed,
        )
        .await
    }

    /// A consumer process does the work and is killed before its commit; the broker redelivers.
    async fn crash(&self, event: &MessageId, url: &str) -> anyhow::Result<Chapter> {
        self.kill_mid_handler(event, url, None).await?;
        // The killed consumer never acknowledged: the broker redelivers.
        let committed = u32::from(self.deliver(event).await?);
        self.chapter(
            format!("consumer SIGKILLed mid-handler, {event} redelivered"),
            event,
            2,
            1,
            committed,
        )
        .await
    }

    /// A consumer process does the work, charges through payments with the carried key, and is
    /// killed before its commit; the redelivery charges again with the same key and payments
    /// replays the first charge.
    async fn crash_after_charge(&self, event: &MessageId, url: &str) -> anyhow::Result<Chapter> {
        let first = self
            .kill_mid_handler(event, url, Some(&self.payments_url))
            .await?
            .context("the consumer to be killed did not say what it charged")?;
        let second = self.deliver_and_charge(event).await?;
        let key = IdempotencyKey::derive(&format!("{}:{event}", self.warehouse), "charge");
        let mut chapter = self
            .chapter(
                format!("consumer charges, is SIGKILLed, {event} redelivered"),
                event,
                2,
                1,
                u32::from(second.is_some()),
            )
            .await?;
        chapter.charges = Some(payments::charges(self.payments).await?);
        chapter.note = Some(match second {
            Some(second) if second == first => format!(
                "{event}: charged {first} before the crash; the redelivery sent the same key \
                 ({key}) and payments replayed {second}: the card was charged once."
            ),
            Some(second) => format!(
                "{event}: charged {first} before the crash, and {second} on the redelivery: \
                 charged twice, the carried key did not hold."
            ),
            None => format!("{event}: charged {first}; the redelivery was a duplicate."),
        });
        Ok(chapter)
    }

    /// Starts a consumer process on `event` (charging through `payments`, if given), waits for
    /// its work to be done and uncommitted, and kills it with SIGKILL; the charge it reported.
    async fn kill_mid_handler(
        &self,
        event: &MessageId,
        url: &str,
        payments: Option<&str>,
    ) -> anyhow::Result<Option<String>> {
        let exe = std::env::current_exe().context("cannot find the guestlist program")?;
        let mut command = Command::new(exe);
        command
            .args(["__demo-crash-consumer", "--event", event.as_str()])
            // In the environment, so that a password stays out of `ps`.
            .env(CRASH_CONSUMER_DATABASE_VAR, url)
            .stdout(Stdio::piped());
        if let Some(payments) = payments {
            command.args(["--payments", payments]);
        }
        let mut child = command
            .spawn()
            .context("cannot start the consumer to be killed")?;
        let stdout = child.stdout.take().expect("piped stdout");
        let reached = tokio::time::timeout(
            Duration::from_secs(60),
            tokio::task::spawn_blocking(move || {
                BufReader::new(stdout)
                    .lines()
                    .map_while(Result::ok)
                    .find_map(|line| line.strip_prefix(crash::WORK_DONE).map(str::to_owned))
            }),
        )
        .await;
        child.kill().context("cannot SIGKILL the consumer")?;
        child.wait()?;
        match reached {
            Ok(Ok(Some(rest))) => Ok(rest.strip_prefix(": charged ").map(str::to_owned)),
            _ => anyhow::bail!("the consumer to be killed never reached its work"),
        }
    }

    /// Delivers `event` to a consumer that picks and charges; the charge id, if it ran.
    async fn deliver_and_charge(&self, event: &MessageId) -> anyhow::Result<Option<String>> {
        let client = payments::client();
        let done = self
            .inbox
            .process(self.pool, self.warehouse, event, async |tx| {
                shop::pick::<DB>(tx, event).await?;
                payments::charge(&client, &self.payments_url, 1200).await
            })
            .await
            .map_err(|err| anyhow::anyhow!("{err}"))?;
        Ok(match done {
            Processed::Ran(charge) => Some(charge),
            Processed::Duplicate => None,
        })
    }

    async fn deliver(&self, event: &MessageId) -> anyhow::Result<bool> {
        let done = self
            .inbox
            .process(self.pool, self.warehouse, event, async |tx| {
                shop::pick::<DB>(tx, event).await
            })
            .await?;
        Ok(matches!(done, Processed::Ran(_)))
    }

    async fn chapter(
        &self,
        story: String,
        event: &MessageId,
        deliveries: u32,
        acks: u32,
        work_committed: u32,
    ) -> anyhow::Result<Chapter> {
        Ok(Chapter {
            story,
            deliveries,
            acks,
            work_committed,
            pick_tasks: shop::pick_tasks(self.pool, Some(event)).await?,
            charges: None,
            note: None,
        })
    }
}
