//! `guestlist-bench steps`: a three-step message (two external no-op steps around a database
//! step) through `Inbox::process_steps`, beside the same statements written by hand, the same
//! handler with carried keys and no journal (`Inbox::process`), and the same three steps as a
//! DBOS workflow, on one PostgreSQL, interleaved round by round at 1 and 16 workers.
//!
//! Figures: `steps3` (fresh messages), `steps3_batch` (batches of fresh messages through
//! `Inbox::process_steps_batch`, their steps journaled together), `steps3_duplicate` (handled
//! ones again), `steps3_by_hand`, `carried_keys_only`, `carried_keys_only_batch` (the same
//! batches with no journal: the floor of `steps3_batch`), `dbos3` and `dbos3_duplicate`.

mod by_hand;
mod dbos;

use std::sync::Arc;
use std::time::Duration;

use anyhow::Context;
use guestlist::inbox::Steps;
use guestlist::sqlx::{self, AssertSqlSafe, PgPool};
use guestlist::{HandlerName, Inbox, MessageId};

use self::by_hand::ByHand;
use self::dbos::Dbos;
use crate::Common;
use crate::cpu::CpuClock;
use crate::measure::{Plan, load, median_of};
use crate::report::{Report, Row};

const WORKERS: [usize; 2] = [1, 16];
/// Ids handled before a duplicate figure, per worker.
const DUPLICATES_PER_WORKER: u64 = 100;
/// Messages per batch of the batch figure, as a consumer's batch.
const BATCH: u64 = 100;
const INBOX: &str = "bench_steps_inbox";
const HAND: &str = "bench_steps_hand";
const PICKS: &str = "bench_steps_picks";

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Figure {
    Steps,
    StepsBatch,
    StepsDuplicate,
    ByHand,
    CarriedKeysOnly,
    CarriedKeysOnlyBatch,
    Dbos,
    DbosDuplicate,
}

impl Figure {
    const ALL: [Figure; 8] = [
        Figure::Steps,
        Figure::StepsBatch,
        Figure::StepsDuplicate,
        Figure::ByHand,
        Figure::CarriedKeysOnly,
        Figure::CarriedKeysOnlyBatch,
        Figure::Dbos,
        Figure::DbosDuplicate,
    ];

    fn name(self) -> &'static str {
        match self {
            Figure::Steps => "steps3",
            Figure::StepsBatch => "steps3_batch",
            Figure::StepsDuplicate => "steps3_duplicate",
            Figure::ByHand => "steps3_by_hand",
            Figure::CarriedKeysOnly => "carried_keys_only",
            Figure::CarriedKeysOnlyBatch => "carried_keys_only_batch",
            Figure::Dbos => "dbos3",
            Figure::DbosDuplicate => "dbos3_duplicate",
        }
    }
}

struct Bench {
    pool: PgPool,
    inbox: Inbox<sqlx::Postgres>,
    handler: HandlerName,
    by_hand: ByHand,
    dbos: Dbos,
}

pub(crate) async fn run(common: &Common) -> anyhow::Result<Report> {
    let url = &common.database;
    anyhow::ensure!(
        url.starts_with("postgres"),
        "the steps bench runs on PostgreSQL (DBOS's only database): pass --database postgres://…"
    );
    let plan = Plan::of(common);
    let pool = sqlx::postgres::PgPoolOptions::new()
        .max_connections(WORKERS[1] as u32 + 2)
        .connect(url)
        .await
        .with_context(|| format!("cannot connect to {url}; is the server running?"))?;
    for table in [INBOX, HAND, PICKS] {
        for suffix in ["", "_steps", "_dead", "_deferrals"] {
            let drop = format!("DROP TABLE IF EXISTS {table}{suffix}");
            sqlx::raw_sql(AssertSqlSafe(drop)).execute(&pool).await?;
        }
    }
    let inbox = Inbox::<sqlx::Postgres>::with_table(INBOX)?;
    inbox.migrate(&pool).await?;
    Inbox::<sqlx::Postgres>::with_table(HAND)?
        .migrate(&pool)
        .await?;
    let create = format!("CREATE TABLE {PICKS} (event TEXT NOT NULL)");
    sqlx::raw_sql(AssertSqlSafe(create)).execute(&pool).await?;
    let dbos = Dbos::launch(url, pool.clone(), PICKS, WORKERS[1] as u32 + 4).await?;
    let bench = Arc::new(Bench {
        pool,
        inbox,
        handler: HandlerName::new("warehouse")?,
        by_hand: ByHand {
            inbox: HAND.to_owned(),
            steps: format!("{HAND}_steps"),
            picks: PICKS.to_owned(),
        },
        dbos,
    });
    let mut report = Report::default();
    for workers in WORKERS {
        let mut samples: Vec<(Figure, f64)> = Vec::new();
        let mut cpu: Vec<(Figure, f64)> = Vec::new();
        for round in 0..plan.rounds {
            for figure in plan.order(round, &Figure::ALL) {
                bench.reset().await?;
                let (rate, cpu_us) = bench
                    .clone()
                    .measure(figure, workers, round, plan.each)
                    .await?;
                let cpu_text =
                    cpu_us.map_or_else(String::new, |us| format!("  {us:>7.1} CPU µs/msg"));
                eprintln!(
                    "  {:<20} workers {workers:>2}  round {round}  {rate:>9.0} msgs/s{cpu_text}",
                    figure.name()
                );
                samples.push((figure, rate));
                cpu.extend(cpu_us.map(|us| (figure, us)));
            }
        }
        for figure in Figure::ALL {
            report.rows.push(Row {
                name: figure.name().to_owned(),
                backend: "postgres",
                workers,
                batch: if matches!(figure, Figure::StepsBatch | Figure::CarriedKeysOnlyBatch) {
                    BATCH as usize
                } else {
                    1
                },
                per_sec: median_of(&samples, &figure),
                unit: "msgs/s",
                latency: None,
            });
            if cpu.iter().any(|(f, _)| *f == figure) {
                report.rows.push(Row {
                    name: format!("{}_cpu", figure.name()),
                    backend: "postgres",
                    workers,
                    batch: 1,
                    per_sec: median_of(&cpu, &figure),
                    unit: "CPU µs/msg",
                    latency: None,
                });
            }
        }
    }
    if let Ok(bench) = Arc::try_unwrap(bench) {
        bench.dbos.shutdown().await;
    }
    add_ratios(&mut report);
    Ok(report)
}

/// A message id for `figure`'s round `round`, worker `worker`, `n`th message.
fn event(figure: Figure, round: usize, worker: usize, n: u64) -> String {
    format!("{}-r{round}-w{worker}-{n}", figure.name())
}

impl Bench {
    /// Empties every table the figures write, so each starts alike.
    async fn reset(&self) -> anyhow::Result<()> {
        let tables = format!("{INBOX}, {INBOX}_steps, {HAND}, {HAND}_steps, {PICKS}");
        sqlx::raw_sql(AssertSqlSafe(format!("TRUNCATE TABLE {tables}")))
            .execute(&self.pool)
            .await?;
        Dbos::reset(&self.pool).await
    }

    async fn measure(
        self: Arc<Self>,
        figure: Figure,
        workers: usize,
        round: usize,
        each: Duration,
    ) -> anyhow::Result<(f64, Option<f64>)> {
        if matches!(figure, Figure::StepsDuplicate | Figure::DbosDuplicate) {
            // Handled once first: the figure is their redeliveries.
            for worker in 0..workers {
                for n in 0..DUPLICATES_PER_WORKER {
                    self.step(figure, round, worker, n, true).await?;
                }
            }
        }
        let cpu = CpuClock::now();
        let run = load(workers, each, move |worker, n| {
            let bench = self.clone();
            async move { bench.step(figure, round, worker, n, false).await }
        });
        let per_sec = run.await?.per_sec;
        // The whole machine's CPU per message (the bench, DBOS and PostgreSQL together).
        let cpu_us = cpu
            .and_then(|cpu| cpu.busy_since())
            .map(|busy| busy * 1e6 / (per_sec * each.as_secs_f64()));
        Ok((per_sec, cpu_us))
    }

    /// One message of `figure`; `first` handles a duplicate figure's message the first time.
    async fn step(
        &self,
        figure: Figure,
        round: usize,
        worker: usize,
        n: u64,
        first: bool,
    ) -> anyhow::Result<u64> {
        let duplicate = matches!(figure, Figure::StepsDuplicate | Figure::DbosDuplicate);
        let n = if duplicate {
            n % DUPLICATES_PER_WORKER
        } else {
            n
        };
        let id = event(figure, round, worker, n);
        match figure {
            Figure::Steps | Figure::StepsDuplicate => {
                let done = self.steps(&id).await?;
                let ran = matches!(done, guestlist::inbox::Stepped::Ran(()));
                anyhow::ensure!(ran == (!duplicate || first), "{id}: unexpected {done:?}");
            }
            Figure::ByHand => {
                anyhow::ensure!(self.by_hand.run(&self.pool, "warehouse", &id).await?);
            }
            Figure::StepsBatch => return self.steps_batch(&id).await,
            Figure::CarriedKeysOnly => self.carried_keys_only(&id).await?,
            Figure::CarriedKeysOnlyBatch => return self.carried_keys_only_batch(&id).await,
            Figure::Dbos | Figure::DbosDuplicate => self.dbos.run(&id).await?,
        }
        Ok(1)
    }

    /// The three steps through `Inbox::process_steps`, the final commit writing nothing but
    /// the claim.
    async fn steps(&self, id: &str) -> anyhow::Result<guestlist::inbox::Stepped<()>> {
        let message = MessageId::new(id)?;
        let insert = format!("INSERT INTO {PICKS} (event) VALUES ($1)");
        let done = self
            .inbox
            .process_steps(
                &self.pool,
                &self.handler,
                &message,
                async |steps| three_steps(steps, id, insert).await,
                async |_tx, ()| anyhow::Ok(()),
            )
            .await?;
        Ok(done)
    }

    /// A batch of [`BATCH`] messages (`id` and a number) through
    /// `Inbox::process_steps_batch`: the same three steps, journaled together.
    async fn steps_batch(&self, id: &str) -> anyhow::Result<u64> {
        let ids = (0..BATCH)
            .map(|n| MessageId::new(format!("{id}-{n}")))
            .collect::<Result<Vec<_>, _>>()?;
        let insert = format!("INSERT INTO {PICKS} (event) VALUES ($1)");
        let runs = ids.iter().map(|id| {
            let (event, insert) = (id.to_string(), insert.clone());
            let work = async move |steps: &mut Steps<sqlx::Postgres>| {
                three_steps(steps, &event, insert).await
            };
            (
                id.clone(),
                work,
                async |_tx: &mut sqlx::PgConnection, ()| anyhow::Ok(()),
            )
        });
        let done = self
            .inbox
            .process_steps_batch(&self.pool, &self.handler, runs)
            .await;
        for (id, done) in ids.iter().zip(done) {
            let ran = matches!(done?, guestlist::inbox::Stepped::Ran(()));
            anyhow::ensure!(ran, "{id}: a duplicate among fresh messages");
        }
        Ok(BATCH)
    }

    /// The same handler with no journal: the claim and the database write on one
    /// transaction, the two calls' keys carried (`Inbox::process`).
    async fn carried_keys_only(&self, id: &str) -> anyhow::Result<()> {
        let message = MessageId::new(id)?;
        let insert = format!("INSERT INTO {PICKS} (event) VALUES ($1)");
        let event = id.to_owned();
        let done = self
            .inbox
            .process(&self.pool, &self.handler, &message, async move |tx| {
                // Where the two calls would go, their carried keys.
                std::hint::black_box(guestlist::carry::key_for("a")?);
                sqlx::query(AssertSqlSafe(insert.clone()))
                    .bind(&event)
                    .execute(&mut *tx)
                    .await?;
                std::hint::black_box(guestlist::carry::key_for("b")?);
                anyhow::Ok(())
            })
            .await?;
        anyhow::ensure!(done.ran(), "{id}: a duplicate among fresh messages");
        Ok(())
    }
}

impl Bench {
    /// A batch of [`BATCH`] messages with no journal: claimed in one statement, each message's
    /// row written and its two calls' keys carried on the same transaction
    /// (`Inbox::process_batch`). What `steps3_batch` would cost without its steps.
    async fn carried_keys_only_batch(&self, id: &str) -> anyhow::Result<u64> {
        let ids = (0..BATCH)
            .map(|n| MessageId::new(format!("{id}-{n}")))
            .collect::<Result<Vec<_>, _>>()?;
        let insert = format!("INSERT INTO {PICKS} (event) VALUES ($1)");
        let handler = self.handler.clone();
        let done = self
            .inbox
            .process_batch(&self.pool, &self.handler, &ids, async move |tx, fresh| {
                for event in fresh {
                    // Each message's work under its own key, as a batch's handler carries it.
                    let work = carried_insert(tx, event.as_str(), insert.clone());
                    guestlist::carry::scope_message(&handler, event, work).await?;
                }
                anyhow::Ok(())
            })
            .await?;
        anyhow::ensure!(
            done.duplicates.is_empty(),
            "{id}: duplicates among fresh messages"
        );
        Ok(BATCH)
    }
}

/// One message of [`Bench::carried_keys_only_batch`]: its row, between its two calls' keys.
async fn carried_insert(
    tx: &mut sqlx::PgConnection,
    event: &str,
    insert: String,
) -> anyhow::Result<()> {
    std::hint::black_box(guestlist::carry::key_for("a")?);
    sqlx::query(AssertSqlSafe(insert))
        .bind(event)
        .execute(&mut *tx)
        .await?;
    std::hint::black_box(guestlist::carry::key_for("b")?);
    Ok(())
}

/// The bench's handler: two external no-op steps around a database step that inserts a row
/// (`insert`, binding `event`).
async fn three_steps(
    steps: &mut Steps<sqlx::Postgres>,
    event: &str,
    insert: String,
) -> anyhow::Result<()> {
    let _: String = steps
        .external("a", || async { anyhow::Ok(format!("a:{event}")) })
        .await?;
    steps
        .database("reserve", async |tx| {
            sqlx::query(AssertSqlSafe(insert))
                .bind(event)
                .execute(&mut *tx)
                .await
                .map(drop)
        })
        .await?;
    let _: String = steps
        .external("b", || async { anyhow::Ok(format!("b:{event}")) })
        .await?;
    anyhow::Ok(())
}

/// The ratios the guide's Steps chapter quotes: at 16 workers, and at 1 (suffixed).
fn add_ratios(report: &mut Report) {
    for workers in WORKERS {
        let get = |name| report.get(name, "postgres", workers);
        let suffix = if workers == WORKERS[1] {
            "postgres".to_owned()
        } else {
            format!("postgres_{workers}worker")
        };
        let ratios = [
            ("steps3_vs_dbos", get("steps3") / get("dbos3")),
            ("steps3_batch_vs_dbos", get("steps3_batch") / get("dbos3")),
            (
                "steps3_duplicate_vs_dbos_duplicate",
                get("steps3_duplicate") / get("dbos3_duplicate"),
            ),
            (
                "steps3_vs_same_statements_by_hand",
                get("steps3") / get("steps3_by_hand"),
            ),
            (
                "steps3_vs_carried_keys_only",
                get("steps3") / get("carried_keys_only"),
            ),
            // The journal's price in batches: what bounds `steps3_batch_vs_dbos`.
            (
                "steps3_batch_vs_carried_keys_only_batch",
                get("steps3_batch") / get("carried_keys_only_batch"),
            ),
            // What bounds `steps3_vs_dbos` on a machine the two fill: the CPU each message
            // costs the whole machine.
            (
                "dbos3_cpu_vs_steps3_cpu",
                get("dbos3_cpu") / get("steps3_cpu"),
            ),
        ];
        for (name, value) in ratios.into_iter().filter(|(_, v)| v.is_finite()) {
            report.ratios.insert(format!("{name}_{suffix}"), value);
        }
    }
}
