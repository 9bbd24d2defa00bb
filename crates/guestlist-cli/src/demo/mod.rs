//! `guestlist demo`: the warehouse story, played for real on a database.
//!
//! OrderPaid `evt_9f3k` is delivered five times; a second event follows; two consumers race one
//! duplicate; a consumer is killed with SIGKILL after its work and before its commit, and the
//! redelivery does the work once. Every effect is counted in the database, not in memory.

pub(crate) mod crash;
mod report;
mod shop;

use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context;
use guestlist::sqlx::Pool;
use guestlist::{HandlerName, Inbox, MessageId, Processed};
use tokio::sync::Barrier;

use self::report::Chapter;
use self::shop::Shop;
use crate::cli::DemoArgs;
use crate::database::{self, Kind, with_pool};

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
    let chapters = with_pool!(pool, |pool| story(&pool, &url).await)?;
    report::print(&chapters);
    let deliveries: u32 = chapters.iter().map(|c| c.deliveries).sum();
    let tasks: i64 = chapters.iter().map(|c| c.pick_tasks).sum();
    println!(
        "\n{deliveries} deliveries of {} events: {tasks} pick tasks, one per event.",
        chapters.len()
    );
    Ok(())
}

async fn story<DB: Shop>(pool: &Pool<DB>, url: &str) -> anyhow::Result<Vec<Chapter>> {
    let inbox = shop::open(pool).await?;
    let warehouse = HandlerName::new("warehouse")?;
    let ctx = Story {
        pool,
        inbox: &inbox,
        warehouse: &warehouse,
    };
    Ok(vec![
        ctx.redeliveries(&MessageId::new("evt_9f3k")?, 5).await?,
        ctx.redeliveries(&MessageId::new("evt_7h2m")?, 1).await?,
        ctx.race(&MessageId::new("evt_r4c3")?).await?,
        ctx.crash(&MessageId::new("evt_k1ll")?, url).await?,
    ])
}

struct Story<'a, DB: Shop> {
    pool: &'a Pool<DB>,
    inbox: &'a Inbox<DB>,
    warehouse: &'a HandlerName,
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
                    .process(&pool, &warehouse, &event, shop::pick::<DB>(&event))
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
        let exe = std::env::current_exe().context("cannot find the guestlist program")?;
        let mut child = Command::new(exe)
            .args([
                "__demo-crash-consumer",
                "--database",
                url,
                "--event",
                event.as_str(),
            ])
            .stdout(Stdio::piped())
            .spawn()
            .context("cannot start the consumer to be killed")?;
        let stdout = child.stdout.take().expect("piped stdout");
        let reached = tokio::time::timeout(
            Duration::from_secs(60),
            tokio::task::spawn_blocking(move || {
                BufReader::new(stdout)
                    .lines()
                    .map_while(Result::ok)
                    .any(|line| line == crash::WORK_DONE)
            }),
        )
        .await;
        child.kill().context("cannot SIGKILL the consumer")?;
        child.wait()?;
        anyhow::ensure!(
            matches!(reached, Ok(Ok(true))),
            "the consumer to be killed never reached its work"
        );
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

    async fn deliver(&self, event: &MessageId) -> anyhow::Result<bool> {
        let done = self
            .inbox
            .process(self.pool, self.warehouse, event, shop::pick::<DB>(event))
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
        })
    }
}
