//! `guestlist-bench`: guestlist measured side by side with what it replaces, in one run.
//!
//! Each subcommand runs guestlist and its baseline (raw SQL written by hand, or no dedup at all)
//! on the same machine, database and load, interleaved, and reports throughput and the ratios
//! between them. Timing is only ever reported here, never asserted in a test.
//!
//! The guide tells the whole story, with each part's guarantees and failure tables: see
//! [performance](https://github.com/guestlist-rs/guestlist/blob/main/docs/guide/src/performance.md)
//! (or build it locally with `mdbook serve docs/guide`).

mod broker;
mod cpu;
mod gateway;
mod http;
mod inbox;
mod measure;
mod outbox;
mod report;
mod requests;
mod steps;
mod work_future;

use clap::{Args, Parser, Subcommand};

/// guestlist's benchmarks.
#[derive(Debug, Parser)]
#[command(name = "guestlist-bench", version, about)]
struct Cli {
    #[command(subcommand)]
    bench: Bench,
}

#[derive(Debug, Subcommand)]
enum Bench {
    /// The inbox: work alone, a hand-written claim, guestlist's claim, duplicates, batches;
    /// with `--rows N`, the inbox loaded with N rows against an empty one, and its purge.
    Inbox(InboxArgs),
    /// The Idempotency-Key layer: an axum handler unprotected, with fresh keys, and replaying.
    Http(HttpArgs),
    /// Broker consumers on NATS JetStream, RabbitMQ, Kafka and SQS (`GUESTLIST_BENCH_BROKERS`
    /// picks): no inbox, against batches of 1, 10, 100.
    Broker(Common),
    /// `guestlist gateway`: the upstream alone, nginx as a plain proxy, fresh keys, replays.
    Gateway(Common),
    /// The outbox relay to NATS JetStream and RabbitMQ: against publishing straight with no
    /// database, and against a hand-written polling relay.
    Outbox(Common),
    /// Steps on PostgreSQL: a three-step message through `Inbox::process_steps`, against the
    /// same statements by hand, the handler with carried keys and no journal, and a DBOS
    /// workflow of the same three steps.
    Steps(Common),
    /// Not a bench: the process `http` kills while its handler holds a key.
    #[command(hide = true)]
    HoldKey(HoldKeyArgs),
}

/// Flags of the hidden `guestlist-bench hold-key`.
#[derive(Debug, Args, Clone)]
struct HoldKeyArgs {
    /// The PostgreSQL whose key table the handler holds a key of.
    #[arg(long)]
    database: String,
}

/// Flags every bench takes.
#[derive(Debug, Args, Clone)]
pub(crate) struct Common {
    /// The database to measure, besides SQLite: postgres://…, mysql://… or sqlite:PATH.
    #[arg(
        long,
        env = "GUESTLIST_BENCH_DATABASE_URL",
        default_value = "postgres://postgres@127.0.0.1:5432/test"
    )]
    pub(crate) database: String,
    /// The Redis the gateway bench measures the gateway and its peer on, and the http bench its
    /// wait on.
    #[arg(
        long,
        env = "GUESTLIST_BENCH_REDIS_URL",
        default_value = "redis://127.0.0.1:6379"
    )]
    pub(crate) redis: String,
    /// A short run (under two minutes): fewer and shorter rounds, noisier figures.
    #[arg(long)]
    pub(crate) quick: bool,
    /// Run this many rounds (rounded up to an even number) instead of the plan's 4 (2 with
    /// --quick): a ratio is the median of its rounds', steadier the more there are.
    #[arg(long, value_parser = clap::value_parser!(u16).range(1..))]
    pub(crate) rounds: Option<u16>,
    /// Also write every figure and ratio to this file as JSON.
    #[arg(long)]
    pub(crate) json: Option<std::path::PathBuf>,
}

/// Flags of `guestlist-bench http`.
#[derive(Debug, Args, Clone)]
pub(crate) struct HttpArgs {
    #[command(flatten)]
    pub(crate) common: Common,
    /// Measure only these figures (names as the report prints them, comma-separated), e.g.
    /// `fresh,fresh_with_wait_on` with `--rounds 20` for that one ratio; the waits and the
    /// take-over are measured only when no figure is named.
    #[arg(long, value_delimiter = ',')]
    pub(crate) figures: Vec<String>,
}

/// Flags of `guestlist-bench inbox`.
#[derive(Debug, Args, Clone)]
pub(crate) struct InboxArgs {
    #[command(flatten)]
    pub(crate) common: Common,
    /// Load the inbox with this many rows over a week, then measure claims on it against an
    /// empty one and a purge of its oldest day (the database given only).
    #[arg(long)]
    pub(crate) rows: Option<u64>,
    /// With --rows: the purge's batch size [default: `Purge`'s for the database].
    #[arg(long)]
    pub(crate) purge_batch: Option<u32>,
    /// With --rows: the purge's pause between batches, in milliseconds.
    #[arg(long, default_value_t = guestlist::retention::Purge::<guestlist::sqlx::Postgres>::DEFAULT_PAUSE.as_millis() as u64)]
    pub(crate) purge_pause_ms: u64,
    /// With --rows: skip the bytes-per-row figures of each id shape.
    #[arg(long)]
    pub(crate) no_shapes: bool,
    /// With --rows: skip the key table's figures (N stored responses of 512 bytes).
    #[arg(long)]
    pub(crate) no_keys: bool,
    /// With --rows: keep the loaded table (topped back up to N rows) and reuse it next time.
    #[arg(long)]
    pub(crate) keep: bool,
    /// With --rows: load the table without its indexes and build them afterwards, as a restore
    /// does (PostgreSQL only). Far faster past 10 million rows; the indexes come out denser than
    /// rows arriving one by one leave them.
    #[arg(long)]
    pub(crate) index_after_load: bool,
}

fn main() -> anyhow::Result<()> {
    let cli = Cli::parse();
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()?;
    if let Bench::HoldKey(args) = &cli.bench {
        return runtime.block_on(http::hold_key(&args.database));
    }
    let report = runtime.block_on(async {
        match &cli.bench {
            Bench::HoldKey(_) => unreachable!("served above"),
            Bench::Inbox(args) => inbox::run(args).await,
            Bench::Http(args) => http::run(args).await,
            Bench::Broker(common) => broker::run(common).await,
            Bench::Gateway(common) => gateway::run(common).await,
            Bench::Outbox(common) => outbox::run(common).await,
            Bench::Steps(common) => steps::run(common).await,
        }
    })?;
    report.print();
    let common = match &cli.bench {
        Bench::Inbox(InboxArgs { common, .. })
        | Bench::Http(HttpArgs { common, .. })
        | Bench::Broker(common)
        | Bench::Gateway(common)
        | Bench::Outbox(common)
        | Bench::Steps(common) => common,
        Bench::HoldKey(_) => unreachable!("served above"),
    };
    if let Some(path) = &common.json {
        report.write_json(path)?;
        println!("\nwrote {}", path.display());
    }
    Ok(())
}
