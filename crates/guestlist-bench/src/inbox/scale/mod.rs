//! `guestlist-bench inbox --rows N`: the inbox at production size.
//!
//! Fills one inbox with N rows spread over a week (a seventh of them a day), then measures in
//! one run, with 4 workers:
//! - single claims and batch-100 claims on the loaded table and on an empty one, interleaved
//!   round by round, and beside them (PostgreSQL) the same batch claim written by hand in raw
//!   SQL on the same two tables: the database's own loaded/empty floor;
//! - three times over: live single claims while nothing else runs (`claims_idle`), then while a
//!   purge deletes the oldest day left (`claims_during_purge`), and the purge's own rate; the
//!   ratios are the medians of the three;
//! - the bytes each row costs, table and indexes, for each id shape;
//! - the HTTP key table loaded with N stored responses too (see `key_table`).
//!
//! Claims are `Inbox::process` with no work of their own: the claim and its transaction alone.

use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::Context;
use guestlist::sqlx::{self, Pool};
use guestlist::{HandlerName, Inbox, MessageId, inbox::InboxStats};

use super::preload::{Preload, Shape, in_chunks};
use super::ratios::{add_ratios, record_bytes};
use crate::measure::{Load, Plan, load, median};
use crate::report::{Latency, Report, Row};

mod purge;

const LOADED_TABLE: &str = "bench_scale_inbox";
const EMPTY_TABLE: &str = "bench_scale_empty";
const SHAPE_TABLE: &str = "bench_scale_shape";
/// Claiming workers, in every figure.
const WORKERS: usize = 4;
const BATCH: usize = 100;
const DAY: Duration = Duration::from_secs(24 * 3600);
/// Rows per id shape for the bytes-per-row figures (fewer when N is small).
const SHAPE_ROWS: u64 = 1_000_000;

/// What `--rows` runs with.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Scale {
    /// Rows to load.
    pub(crate) rows: u64,
    /// The purge's batch size, where not the database's default.
    pub(crate) purge_batch: Option<u32>,
    /// The purge's pause between batches.
    pub(crate) purge_pause: Duration,
    /// Measure bytes per row for each id shape.
    pub(crate) shapes: bool,
    /// Load the HTTP key table with N rows too, and measure keys on it.
    pub(crate) keys: bool,
    /// Keep the loaded table (topped back up to N rows) for the next run with `keep`.
    pub(crate) keep: bool,
    /// Load the table without its indexes, then build them.
    pub(crate) index_after_load: bool,
}

/// The claims measured on the loaded and the empty table.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Figure {
    SingleEmpty,
    SingleLoaded,
    BatchEmpty,
    BatchLoaded,
    RawBatchEmpty,
    RawBatchLoaded,
}

impl Figure {
    const ALL: [Figure; 6] = [
        Figure::SingleEmpty,
        Figure::SingleLoaded,
        Figure::RawBatchEmpty,
        Figure::BatchEmpty,
        Figure::BatchLoaded,
        Figure::RawBatchLoaded,
    ];

    fn name(self) -> &'static str {
        match self {
            Figure::SingleEmpty => "single_empty",
            Figure::SingleLoaded => "single_loaded",
            Figure::BatchEmpty => "batch100_empty",
            Figure::BatchLoaded => "batch100_loaded",
            Figure::RawBatchEmpty => "raw_batch100_empty",
            Figure::RawBatchLoaded => "raw_batch100_loaded",
        }
    }

    fn batch(self) -> usize {
        match self {
            Figure::SingleEmpty | Figure::SingleLoaded => 1,
            _ => BATCH,
        }
    }

    fn loaded(self) -> bool {
        matches!(
            self,
            Figure::SingleLoaded | Figure::BatchLoaded | Figure::RawBatchLoaded
        )
    }

    fn raw(self) -> bool {
        matches!(self, Figure::RawBatchEmpty | Figure::RawBatchLoaded)
    }
}

/// Runs the whole scale bench on `pool`.
pub(crate) async fn measure<DB: Preload>(
    pool: &Pool<DB>,
    plan: Plan,
    scale: Scale,
    report: &mut Report,
) -> anyhow::Result<()> {
    let loaded = Inbox::<DB>::with_table(LOADED_TABLE)?;
    let empty = Inbox::<DB>::with_table(EMPTY_TABLE)?;
    for statement in DB::PREPARE {
        DB::exec(pool, (*statement).to_owned()).await?;
    }
    prepare_loaded(pool, &loaded, scale).await?;
    drop::<DB>(pool, EMPTY_TABLE).await?;
    empty.migrate(pool).await?;
    let before = analyze_and_read(pool, &loaded).await?;
    eprintln!(
        "  {LOADED_TABLE}: {} rows, {:.0} bytes a row ({:?})",
        before.rows,
        before.bytes_per_row().unwrap_or(f64::NAN),
        before.size
    );

    let bench = Arc::new(Claims {
        pool: pool.clone(),
        loaded,
        empty,
        handler: HandlerName::new("warehouse")?,
    });
    claims(&bench, plan, report).await?;
    let deleted = purge::purge(&bench, plan, scale, report).await?;
    if scale.shapes {
        bytes_per_row(pool, scale.rows, report).await?;
    }
    if scale.keys {
        super::key_table::measure(pool, plan, scale.rows, report).await?;
    }

    if scale.keep {
        top_up(pool, deleted).await?;
    } else {
        drop::<DB>(pool, LOADED_TABLE).await?;
    }
    drop::<DB>(pool, EMPTY_TABLE).await?;
    add_ratios(report, DB::LABEL, scale.rows, WORKERS, &before);
    Ok(())
}

/// Loads the table with N rows, or keeps last run's when `keep` and it holds about N.
async fn prepare_loaded<DB: Preload>(
    pool: &Pool<DB>,
    inbox: &Inbox<DB>,
    scale: Scale,
) -> anyhow::Result<()> {
    if scale.keep
        && let Ok(stats) = inbox.stats(pool).await
        && stats.rows.abs_diff(scale.rows) as f64 / (scale.rows as f64) < 0.1
    {
        eprintln!("  reusing {LOADED_TABLE}: {} rows", stats.rows);
        return Ok(());
    }
    drop::<DB>(pool, LOADED_TABLE).await?;
    inbox.migrate(pool).await?;
    let rebuild = if scale.index_after_load {
        let rebuild = DB::take_indexes_off(pool, LOADED_TABLE).await?;
        Some(rebuild.context("--index-after-load is for PostgreSQL only")?)
    } else {
        None
    };
    fill(pool, LOADED_TABLE, Shape::Mixed, scale.rows, true).await?;
    if let Some(rebuild) = rebuild {
        let started = Instant::now();
        DB::exec(pool, rebuild)
            .await
            .with_context(|| format!("building {LOADED_TABLE}'s indexes again"))?;
        eprintln!(
            "  built {LOADED_TABLE}'s indexes in {:.1} s",
            started.elapsed().as_secs_f64()
        );
    }
    Ok(())
}

/// Fills `table` with `rows` rows of `shape`, a chunk per statement.
async fn fill<DB: Preload>(
    pool: &Pool<DB>,
    table: &str,
    shape: Shape,
    rows: u64,
    progress: bool,
) -> anyhow::Result<()> {
    let started = Instant::now();
    let chunk = |from, to| DB::chunk(table, shape, from, to, rows);
    in_chunks(pool, rows, chunk, |to| {
        if progress {
            eprintln!(
                "  loaded {to} of {rows} rows in {:.0} s",
                started.elapsed().as_secs_f64()
            );
        }
    })
    .await
    .with_context(|| format!("filling {table}"))?;
    let secs = started.elapsed().as_secs_f64();
    eprintln!(
        "  filled {table} with {rows} {} rows in {secs:.1} s ({:.0} rows/s)",
        shape.name(),
        rows as f64 / secs
    );
    Ok(())
}

/// Refreshes the table's statistics and reads its figures.
async fn analyze_and_read<DB: Preload>(
    pool: &Pool<DB>,
    inbox: &Inbox<DB>,
) -> anyhow::Result<InboxStats> {
    DB::exec(pool, format!("{} {}", DB::ANALYZE, inbox.table())).await?;
    Ok(inbox.stats(pool).await?)
}

/// The shared state of the claiming workers.
struct Claims<DB: Preload> {
    pool: Pool<DB>,
    loaded: Inbox<DB>,
    empty: Inbox<DB>,
    handler: HandlerName,
}

impl<DB: Preload> Claims<DB> {
    /// One transaction: a single claim, or a batch of 100 (through guestlist, or in raw SQL when
    /// `raw`); returns the ids claimed.
    async fn step(
        &self,
        inbox: &Inbox<DB>,
        batch: usize,
        raw: bool,
        n: u64,
    ) -> anyhow::Result<u64> {
        if raw {
            let mut ids: Vec<String> = (0..batch as u64)
                .map(|i| Shape::Mixed.random_id(n * batch as u64 + i))
                .collect();
            ids.sort_unstable();
            let table = inbox.table().as_str();
            let fresh = DB::raw_claim_batch(&self.pool, table, self.handler.as_str(), &ids)
                .await?
                .context("no raw batch claim is written for this database")?;
            anyhow::ensure!(fresh == batch as u64, "random ids were duplicates");
        } else if batch == 1 {
            let id = MessageId::new(Shape::Mixed.random_id(n))?;
            let done = inbox
                .process(&self.pool, &self.handler, &id, async |_tx| {
                    Ok::<(), sqlx::Error>(())
                })
                .await?;
            anyhow::ensure!(done.ran(), "{id}: a random id was a duplicate");
        } else {
            let ids: Vec<MessageId> = (0..batch as u64)
                .map(|i| MessageId::new(Shape::Mixed.random_id(n * batch as u64 + i)))
                .collect::<Result<_, _>>()?;
            let done = inbox
                .process_batch(&self.pool, &self.handler, &ids, async |_tx, _fresh| {
                    Ok::<(), sqlx::Error>(())
                })
                .await?;
            anyhow::ensure!(done.fresh.len() == batch, "random ids were duplicates");
        }
        Ok(batch as u64)
    }

    /// Claims on `loaded` or `empty` for `each`.
    async fn run(self: &Arc<Self>, figure: Figure, each: Duration) -> anyhow::Result<Load> {
        let claims = self.clone();
        load(WORKERS, each, move |_worker, n| {
            let claims = claims.clone();
            async move {
                let inbox = if figure.loaded() {
                    &claims.loaded
                } else {
                    &claims.empty
                };
                claims.step(inbox, figure.batch(), figure.raw(), n).await
            }
        })
        .await
    }
}

/// Single and batch claims, loaded against empty, interleaved round by round.
async fn claims<DB: Preload>(
    bench: &Arc<Claims<DB>>,
    plan: Plan,
    report: &mut Report,
) -> anyhow::Result<()> {
    // The raw SQL beside guestlist's batches, where it is written for this database.
    let probe = [Shape::Mixed.random_id(0)];
    let raw = DB::raw_claim_batch(&bench.pool, EMPTY_TABLE, "probe", &probe)
        .await?
        .is_some();
    let figures: Vec<Figure> = Figure::ALL
        .into_iter()
        .filter(|figure| raw || !figure.raw())
        .collect();
    let mut samples: Vec<(Figure, f64, Vec<Duration>)> = Vec::new();
    for round in 0..plan.rounds {
        for figure in plan.order(round, &figures) {
            if !figure.loaded() {
                DB::exec(&bench.pool, format!("{} {EMPTY_TABLE}", DB::EMPTY)).await?;
            }
            // The last figure's writes flushed, outside the clock: no figure pays for another's
            // checkpoint (a loaded table's batches write a whole page for each leaf they touch
            // first after one).
            DB::exec(&bench.pool, DB::SETTLE.to_owned()).await?;
            let measured = bench.run(figure, plan.each).await?;
            eprintln!(
                "  {:<16} round {round}  {:>9.0} ids/s",
                figure.name(),
                measured.per_sec
            );
            samples.push((figure, measured.per_sec, measured.latencies));
        }
    }
    for &figure in &figures {
        let mine: Vec<_> = samples.iter().filter(|(f, ..)| *f == figure).collect();
        report.rounds.insert(
            (figure.name().to_owned(), DB::LABEL.to_owned()),
            mine.iter().map(|(_, rate, _)| *rate).collect(),
        );
        let mut latencies: Vec<Duration> = mine.iter().flat_map(|(.., l)| l.clone()).collect();
        report.rows.push(Row {
            name: figure.name().to_owned(),
            backend: DB::LABEL,
            workers: WORKERS,
            batch: figure.batch(),
            per_sec: median(mine.iter().map(|(_, r, _)| *r).collect()),
            unit: "msgs/s",
            latency: Some(Latency::of(&mut latencies)),
        });
    }
    Ok(())
}

/// Bytes per row, table and indexes, for each id shape on a table of its own.
async fn bytes_per_row<DB: Preload>(
    pool: &Pool<DB>,
    rows: u64,
    report: &mut Report,
) -> anyhow::Result<()> {
    let rows = (rows / 10).clamp(1_000, SHAPE_ROWS);
    let inbox = Inbox::<DB>::with_table(SHAPE_TABLE)?;
    for shape in Shape::EACH {
        drop::<DB>(pool, SHAPE_TABLE).await?;
        inbox.migrate(pool).await?;
        fill(pool, SHAPE_TABLE, shape, rows, false).await?;
        let stats = analyze_and_read(pool, &inbox).await?;
        record_bytes(report, DB::LABEL, shape.name(), &stats);
    }
    drop::<DB>(pool, SHAPE_TABLE).await?;
    Ok(())
}

/// Puts back as many rows as the purge deleted, in the oldest day again, so that the next
/// `--keep` run finds the same week. (Their place in the table differs from a day's rows that
/// arrived in time: take final figures from a fresh load.)
async fn top_up<DB: Preload>(pool: &Pool<DB>, deleted: u64) -> anyhow::Result<()> {
    // Numbered as the first seventh of a week's rows, so they land in its first day.
    let week = deleted * 7;
    let chunk = |from, to| DB::chunk(LOADED_TABLE, Shape::Mixed, from, to, week);
    in_chunks(pool, deleted, chunk, |_| {}).await?;
    DB::exec(pool, format!("{} {LOADED_TABLE}", DB::ANALYZE)).await?;
    eprintln!("  kept {LOADED_TABLE}, {deleted} rows put back, for the next --keep run");
    Ok(())
}

/// Drops a bench inbox and the deferrals table `Inbox::migrate` made beside it.
async fn drop<DB: Preload>(pool: &Pool<DB>, table: &str) -> anyhow::Result<()> {
    // One table per statement: SQLite drops no more.
    for table in [table.to_owned(), format!("{table}_deferrals")] {
        DB::exec(pool, format!("DROP TABLE IF EXISTS {table}")).await?;
    }
    Ok(())
}
