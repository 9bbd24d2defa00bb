//! `guestlist-bench inbox`: the price of the claim, measured against the SQL it replaces.
//!
//! Six figures per backend and worker count, interleaved round by round so that drift in the
//! machine hits all of them alike:
//! (a) `work_alone`: the work transaction with no claim (double-processes on redelivery);
//! (b) `handwritten`: the same plus a claim written by hand through sqlx;
//! (c) `inbox`: guestlist's `Inbox::process` doing the same work;
//! (d) `duplicate`: guestlist on ids already claimed (the redelivery path);
//! (e) `batch100`: `Inbox::process_batch` over 100 ids, the work set-based;
//! (f) `handwritten_batch100`: the same batch claim and work written by hand;
//! (g) `redis_setnx`: the shortcut the inbox replaces, one `SET key 1 NX EX <retention>` per
//! message in Redis (no work, no transaction, no fsync), when a Redis answers at `--redis`.

mod key_table;
mod preload;
mod ratios;
mod redis_shortcut;
mod scale;
mod workload;

use std::sync::Arc;
use std::time::Duration;

use anyhow::Context;
use guestlist::sqlx::{self, Pool};
use guestlist::{HandlerName, Inbox, MessageId};

use self::redis_shortcut::RedisShortcut;
use self::workload::{HAND_TABLE, INBOX_TABLE, ORDERS, ORDERS_TABLE, PICKS_TABLE, Workload};
use crate::InboxArgs;
use crate::measure::{Plan, load, median_of};
use crate::report::{Report, Row};

const WORKERS: [usize; 2] = [1, 16];
const BATCH: usize = 100;
/// Ids pre-claimed per worker for the duplicate path.
const DUPLICATES_PER_WORKER: u64 = 100;

/// The figures, in the order each round runs them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Figure {
    WorkAlone,
    Handwritten,
    Inbox,
    Duplicate,
    Batch,
    HandwrittenBatch,
    RedisSetNx,
}

impl Figure {
    const ALL: [Figure; 7] = [
        Figure::WorkAlone,
        Figure::Handwritten,
        Figure::Inbox,
        Figure::Duplicate,
        Figure::Batch,
        Figure::HandwrittenBatch,
        Figure::RedisSetNx,
    ];

    fn name(self) -> &'static str {
        match self {
            Figure::WorkAlone => "work_alone",
            Figure::Handwritten => "handwritten",
            Figure::Inbox => "inbox",
            Figure::Duplicate => "duplicate",
            Figure::Batch => "batch100",
            Figure::HandwrittenBatch => "handwritten_batch100",
            Figure::RedisSetNx => "redis_setnx",
        }
    }

    fn batch(self) -> usize {
        match self {
            Figure::Batch | Figure::HandwrittenBatch => BATCH,
            _ => 1,
        }
    }
}

/// Connects to the database `$url` names and runs `$body` with `$pool` bound to its pool.
macro_rules! on_pool {
    ($url:expr, |$pool:ident| $body:expr) => {{
        let url: &str = $url;
        match url.split(':').next().unwrap_or_default() {
            "postgres" | "postgresql" => {
                let $pool = connect::<sqlx::Postgres>(url.parse()?, url).await?;
                $body
            }
            "mysql" | "mariadb" => {
                let url = url.replacen("mariadb:", "mysql:", 1);
                let $pool = connect::<sqlx::MySql>(url.parse()?, &url).await?;
                $body
            }
            "sqlite" => {
                let $pool = connect::<sqlx::Sqlite>(guestlist::sqlite_options(url)?, url).await?;
                $body
            }
            _ => anyhow::bail!(
                "cannot tell the database from {url:?}: use postgres://, mysql:// or sqlite:"
            ),
        }
    }};
}

pub(crate) async fn run(args: &InboxArgs) -> anyhow::Result<Report> {
    let common = &args.common;
    let plan = Plan::of(common);
    let mut report = Report::default();
    if let Some(rows) = args.rows {
        // `--rows N`: the scale figures on the one database given.
        let scale = scale::Scale {
            rows: rows.max(1),
            purge_batch: args.purge_batch,
            purge_pause: Duration::from_millis(args.purge_pause_ms),
            shapes: !args.no_shapes,
            keys: !args.no_keys,
            keep: args.keep,
            index_after_load: args.index_after_load,
        };
        on_pool!(&common.database, |pool| scale::measure(
            &pool,
            plan,
            scale,
            &mut report
        )
        .await?);
        return Ok(report);
    }
    let scratch = tempfile::tempdir()?;
    let sqlite_url = format!("sqlite:{}", scratch.path().join("bench.db").display());
    let mut urls = vec![common.database.clone()];
    if !common.database.starts_with("sqlite:") {
        urls.push(sqlite_url);
    }
    let redis = match RedisShortcut::connect(&common.redis, WORKERS[1]).await {
        Ok(redis) => Some(Arc::new(redis)),
        Err(err) => {
            eprintln!("redis_setnx left out: {err:#}");
            None
        }
    };
    for url in urls {
        on_pool!(&url, |pool| measure_backend(
            &pool,
            redis.clone(),
            plan,
            &mut report
        )
        .await?);
    }
    add_ratios(&mut report);
    Ok(report)
}

async fn connect<DB: Workload>(
    options: <DB::Connection as sqlx::Connection>::Options,
    url: &str,
) -> anyhow::Result<Pool<DB>> {
    sqlx::pool::PoolOptions::new()
        .max_connections(WORKERS[1] as u32)
        .min_connections(WORKERS[1] as u32)
        .connect_with(options)
        .await
        .with_context(|| format!("cannot connect to {url}; is the server running?"))
}

/// The shared state of one backend's measurements.
struct Bench<DB: Workload> {
    pool: Pool<DB>,
    inbox: Inbox<DB>,
    handler: HandlerName,
    redis: Option<Arc<RedisShortcut>>,
}

async fn measure_backend<DB: Workload>(
    pool: &Pool<DB>,
    redis: Option<Arc<RedisShortcut>>,
    plan: Plan,
    report: &mut Report,
) -> anyhow::Result<()> {
    eprintln!("measuring {} …", DB::LABEL);
    for table in [INBOX_TABLE, HAND_TABLE, ORDERS_TABLE, PICKS_TABLE] {
        DB::exec(pool, format!("DROP TABLE IF EXISTS {table}")).await?;
    }
    let inbox = Inbox::<DB>::with_table(INBOX_TABLE)?;
    inbox.migrate(pool).await?;
    Inbox::<DB>::with_table(HAND_TABLE)?.migrate(pool).await?;
    for statement in DB::SETUP {
        DB::exec(pool, (*statement).to_owned()).await?;
    }
    let bench = Arc::new(Bench {
        pool: pool.clone(),
        inbox,
        handler: HandlerName::new("warehouse")?,
        redis,
    });
    let figures: Vec<Figure> = Figure::ALL
        .into_iter()
        .filter(|figure| *figure != Figure::RedisSetNx || bench.redis.is_some())
        .collect();
    for workers in WORKERS {
        let mut samples: Vec<(Figure, f64)> = Vec::new();
        for round in 0..plan.rounds {
            for figure in plan.order(round, &figures) {
                bench.reset().await?;
                let rate = bench
                    .clone()
                    .measure(figure, workers, round, plan.each)
                    .await?;
                eprintln!(
                    "  {:<22} workers {workers:>2}  round {round}  {rate:>9.0} msgs/s",
                    figure.name()
                );
                samples.push((figure, rate));
            }
        }
        for &figure in &figures {
            report.rows.push(Row {
                name: figure.name().to_owned(),
                backend: DB::LABEL,
                workers,
                batch: figure.batch(),
                per_sec: median_of(&samples, &figure),
                unit: "msgs/s",
                latency: None,
            });
        }
    }
    Ok(())
}

/// A message id that names its order, so the work can be derived from the id alone.
fn event(round: usize, worker: usize, n: u64) -> String {
    let order = (worker as u64 * 7_919 + n) % ORDERS as u64;
    format!("o{order}-r{round}-w{worker}-{n}")
}

/// The order an [`event`] id pays for.
fn order_of(id: &str) -> i64 {
    id[1..id.find('-').expect("a bench id")]
        .parse()
        .expect("a bench id")
}

impl<DB: Workload> Bench<DB> {
    /// Empties the inboxes and the pick tasks, so each figure starts from the same tables (and
    /// no figure inherits another's dead rows).
    async fn reset(&self) -> anyhow::Result<()> {
        for table in [INBOX_TABLE, HAND_TABLE, PICKS_TABLE] {
            DB::exec(&self.pool, format!("{} {table}", DB::EMPTY)).await?;
        }
        if let Some(redis) = &self.redis {
            redis.reset().await?;
        }
        Ok(())
    }

    async fn measure(
        self: Arc<Self>,
        figure: Figure,
        workers: usize,
        round: usize,
        each: Duration,
    ) -> anyhow::Result<f64> {
        if figure == Figure::Duplicate {
            self.claim_duplicates(workers, round).await?;
        }
        let run = load(workers, each, move |worker, n| {
            let bench = self.clone();
            async move { bench.step(figure, round, worker, n).await }
        });
        Ok(run.await?.per_sec)
    }

    /// Claims the ids the duplicate path will see again.
    async fn claim_duplicates(&self, workers: usize, round: usize) -> anyhow::Result<()> {
        let ids: Vec<MessageId> = (0..workers)
            .flat_map(|w| (0..DUPLICATES_PER_WORKER).map(move |n| event(round, w, n)))
            .map(MessageId::new)
            .collect::<Result<_, _>>()?;
        let mut tx = DB::begin_tx(&self.pool).await?;
        self.inbox.claim_batch(&mut tx, &self.handler, &ids).await?;
        tx.commit().await?;
        Ok(())
    }

    /// One transaction of `figure`; returns the messages it handled.
    async fn step(
        &self,
        figure: Figure,
        round: usize,
        worker: usize,
        n: u64,
    ) -> anyhow::Result<u64> {
        match figure {
            Figure::WorkAlone => {
                let id = event(round, worker, n);
                let mut tx = DB::begin_tx(&self.pool).await?;
                DB::work_one(&mut tx, order_of(&id), &id).await?;
                tx.commit().await?;
            }
            Figure::Handwritten => {
                let id = event(round, worker, n);
                let mut tx = DB::begin_tx(&self.pool).await?;
                if DB::hand_claim(&mut tx, self.handler.as_str(), &id).await? {
                    DB::work_one(&mut tx, order_of(&id), &id).await?;
                    tx.commit().await?;
                } else {
                    tx.rollback().await?;
                }
            }
            Figure::Inbox | Figure::Duplicate => {
                let n = if figure == Figure::Duplicate {
                    n % DUPLICATES_PER_WORKER
                } else {
                    n
                };
                let id = MessageId::new(event(round, worker, n))?;
                let order = order_of(id.as_str());
                // Spawned: the closure owns its copy of the id (see `Inbox::process` on Send).
                let event = id.to_string();
                let done = self
                    .inbox
                    .process(&self.pool, &self.handler, &id, async move |tx| {
                        DB::work_one(tx, order, &event).await
                    })
                    .await?;
                anyhow::ensure!(
                    done.ran() == (figure == Figure::Inbox),
                    "{id}: unexpected {done:?}"
                );
            }
            Figure::Batch => {
                let ids: Vec<MessageId> = (0..BATCH as u64)
                    .map(|i| MessageId::new(event(round, worker, n * BATCH as u64 + i)))
                    .collect::<Result<_, _>>()?;
                let done = self
                    .inbox
                    .process_batch(&self.pool, &self.handler, &ids, async move |tx, fresh| {
                        let orders = fresh.iter().map(|id| order_of(id.as_str())).collect();
                        DB::work_batch(tx, orders, fresh.iter().map(MessageId::as_str).collect())
                            .await
                    })
                    .await?;
                anyhow::ensure!(
                    done.fresh.len() == BATCH,
                    "a batch of fresh ids had duplicates"
                );
                return Ok(BATCH as u64);
            }
            Figure::HandwrittenBatch => {
                let mut ids: Vec<String> = (0..BATCH as u64)
                    .map(|i| event(round, worker, n * BATCH as u64 + i))
                    .collect();
                ids.sort_unstable();
                let ids: Vec<&str> = ids.iter().map(String::as_str).collect();
                let mut tx = DB::begin_tx(&self.pool).await?;
                let fresh = DB::hand_claim_batch(&mut tx, self.handler.as_str(), &ids).await?;
                let orders = fresh.iter().map(|id| order_of(id)).collect();
                DB::work_batch(&mut tx, orders, fresh.iter().map(String::as_str).collect()).await?;
                tx.commit().await?;
                return Ok(BATCH as u64);
            }
            Figure::RedisSetNx => {
                let redis = self.redis.as_ref().context("no Redis")?;
                let id = event(round, worker, n);
                let fresh = redis.mark(worker, self.handler.as_str(), &id).await?;
                anyhow::ensure!(fresh, "{id}: already marked in Redis");
            }
        }
        Ok(1)
    }
}

/// The ratios the guide's performance chapter quotes, at 16 workers (and at 1, suffixed).
fn add_ratios(report: &mut Report) {
    let backends: Vec<&'static str> = {
        let mut b: Vec<_> = report.rows.iter().map(|r| r.backend).collect();
        b.dedup();
        b
    };
    for backend in backends {
        for workers in WORKERS {
            let get = |name| report.get(name, backend, workers);
            let suffix = if workers == WORKERS[1] {
                backend.to_owned()
            } else {
                format!("{backend}_{workers}worker")
            };
            let ratios = [
                ("inbox_vs_handwritten", get("inbox") / get("handwritten")),
                ("inbox_vs_work_alone", get("inbox") / get("work_alone")),
                (
                    "batch100_vs_handwritten",
                    get("batch100") / get("handwritten_batch100"),
                ),
                ("batch100_msgs_per_sec", get("batch100")),
                ("duplicate_vs_inbox", get("duplicate") / get("inbox")),
                (
                    "batch100_vs_redis_setnx",
                    get("batch100") / get("redis_setnx"),
                ),
            ];
            // A figure left out (no Redis) leaves its ratios out.
            for (name, value) in ratios.into_iter().filter(|(_, v)| v.is_finite()) {
                report.ratios.insert(format!("{name}_{suffix}"), value);
            }
        }
    }
}
