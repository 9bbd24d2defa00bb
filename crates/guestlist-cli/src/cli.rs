//! The command line.

use std::time::Duration;

use clap::{Args, Parser, Subcommand};

use crate::database::DatabaseUrl;

/// Exactly-once processing off the shelf: the guest list of handled message ids.
///
/// Create the tables (migrate), put idempotency keys in front of any HTTP service (gateway),
/// publish an outbox to NATS JetStream, RabbitMQ, Kafka or SQS (relay) and tend its dead
/// letters (outbox dead), purge old rows (purge), inspect keys and tables (keys, stats), and
/// play the warehouse story (demo). Logs go to stderr; GUESTLIST_LOG sets the filter
/// (`info`, `guestlist=debug`, ...): servers (gateway, relay) log at info by default, other
/// commands at warn.
#[derive(Debug, Parser)]
#[command(name = "guestlist", version, about, long_about)]
pub(crate) struct Cli {
    #[command(subcommand)]
    pub(crate) command: Command,
    /// Log lines as text, or as one JSON object per line for a log collector.
    #[arg(
        long,
        global = true,
        env = "GUESTLIST_LOG_FORMAT",
        default_value = "text"
    )]
    pub(crate) log_format: LogFormat,
    /// Export spans over OTLP/HTTP to the collector at this URL (such as
    /// http://127.0.0.1:4318): the gateway's and the relay's, with the trace context carried
    /// from the outbox's headers onto the broker and from the client's request upstream.
    #[arg(
        long,
        global = true,
        env = "OTEL_EXPORTER_OTLP_ENDPOINT",
        value_name = "URL"
    )]
    pub(crate) otlp_endpoint: Option<String>,
}

/// How log lines look.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub(crate) enum LogFormat {
    /// For people.
    Text,
    /// One JSON object per line.
    Json,
}

#[derive(Debug, Subcommand)]
pub(crate) enum Command {
    /// Create the inbox table and its index (or, with --outbox, the outbox's tables), if missing.
    Migrate(MigrateArgs),
    /// Delete inbox rows older than the retention, in small batches.
    Purge(PurgeArgs),
    /// Stand in front of an HTTP service: retries with the same Idempotency-Key get the first
    /// answer, and webhooks are delivered once.
    Gateway(Box<crate::gateway::args::GatewayArgs>),
    /// Inspect or evict one idempotency key.
    #[command(subcommand)]
    Keys(crate::keys::KeysCommand),
    /// The key table's figures (rows, in flight, oldest, size), and the outbox's when there is
    /// one (pending, oldest pending, the relay holding the lease).
    Stats(crate::stats::StatsArgs),
    /// Everything the inbox, the outbox and the key table know of a message id, an
    /// Idempotency-Key or a key carried from one, in the order it happened: each handler's
    /// claim and deferrals, the message committed, published or dead-lettered (its shard and
    /// the relay holding it), and the keys carried downstream (state, status, attempts, lease).
    /// (`guestlist trace`, its former name, still works.)
    #[command(alias = "trace")]
    History(crate::history::HistoryArgs),
    /// A web page for operators, on 127.0.0.1:8089 by default: what stats shows, kept fresh
    /// (keys, inbox handlers, outbox backlog, relays and shards, purge, dead letters), history
    /// lookups, and, with GUESTLIST_CONSOLE_TOKEN set, retry or drop an outgoing dead letter,
    /// retry (through --nats, --amqp, --kafka or --sqs) or drop an incoming one or a failure
    /// group, and evict a key (signed-in session, CSRF-checked forms). Read-only without the
    /// token.
    Console(crate::console::ConsoleArgs),
    /// Publish an outbox table's committed messages to NATS JetStream, RabbitMQ, Kafka or
    /// Amazon SQS, each key's in commit order, stamping each once the broker confirmed it; a
    /// message the broker refuses holds back its own key only, and goes to the outgoing dead
    /// letters when refused for good.
    Relay(crate::relay::RelayArgs),
    /// The outbox's dead letters: list them, put one back in the outbox, or drop one.
    #[command(subcommand)]
    Outbox(crate::outbox::OutboxCommand),
    /// The inbox's dead letters (messages a handler gave up on): list them, group them by
    /// failure, show one, put one or a group back on the handler's source, or drop them.
    #[command(subcommand)]
    Inbox(crate::inbox_dead::InboxCommand),
    /// Play the warehouse story: redeliveries, a second event, a race, a crash, and a crash after
    /// a charge to another service.
    Demo(DemoArgs),
    /// The consumer the demo starts and kills (not for direct use).
    #[command(name = "__demo-crash-consumer", hide = true)]
    DemoCrashConsumer(CrashConsumerArgs),
}

/// Where the guest list lives.
#[derive(Debug, Args)]
pub(crate) struct DatabaseArgs {
    #[command(flatten)]
    pub(crate) database: DatabaseUrl,
    /// The inbox table.
    #[arg(long, default_value = "guestlist_inbox")]
    pub(crate) table: String,
}

#[derive(Debug, Args)]
pub(crate) struct MigrateArgs {
    #[command(flatten)]
    pub(crate) db: DatabaseArgs,
    /// Print the DDL for the database's kind instead of running it.
    #[arg(long)]
    pub(crate) print: bool,
    /// The outbox's tables instead of the inbox: the table named by --outbox-table, its
    /// `_keys` and its `_relay`.
    #[arg(long)]
    pub(crate) outbox: bool,
    /// The outbox table.
    #[arg(long, default_value = "guestlist_outbox", requires = "outbox")]
    pub(crate) outbox_table: String,
}

#[derive(Debug, Args)]
pub(crate) struct PurgeArgs {
    #[command(flatten)]
    pub(crate) db: DatabaseArgs,
    /// Delete rows older than this (e.g. 7d, 168h).
    #[arg(long, value_parser = humantime::parse_duration)]
    pub(crate) older_than: Duration,
    /// The longest time after which any upstream may still redeliver; a shorter --older-than
    /// is refused (Stripe retries webhooks for 72 hours).
    #[arg(long, value_parser = humantime::parse_duration, default_value = "72h")]
    pub(crate) horizon: Duration,
    /// Rows per batch, each its own short transaction [default: 1000; 5000 on SQLite].
    #[arg(long)]
    pub(crate) batch_size: Option<u32>,
    /// Count the rows that would go, and delete nothing.
    #[arg(long)]
    pub(crate) dry_run: bool,
    /// Purge the outbox instead of the inbox: the published messages a relay kept
    /// (`guestlist relay --keep-published`), by when they were published; pending ones stay.
    #[arg(long)]
    pub(crate) outbox: bool,
    /// The outbox table.
    #[arg(long, default_value = "guestlist_outbox", requires = "outbox")]
    pub(crate) outbox_table: String,
    /// Purge the inbox's dead letters (`<table>_dead`) instead: those recorded longer ago than
    /// --older-than, their own retention (the horizon does not bound it: a dead letter guards
    /// no duplicate). Those being retried stay.
    #[arg(long, conflicts_with = "outbox")]
    pub(crate) dead: bool,
}

#[derive(Debug, Args)]
pub(crate) struct DemoArgs {
    /// Play on this database instead of a fresh SQLite file. Uses (and resets) tables named
    /// guestlist_demo_*.
    #[arg(long)]
    pub(crate) database: Option<String>,
}

#[derive(Debug, Args)]
pub(crate) struct CrashConsumerArgs {
    /// Passed in the environment, not on the command line, so that a password stays out of `ps`.
    #[arg(long, env = CRASH_CONSUMER_DATABASE_VAR)]
    pub(crate) database: String,
    #[arg(long)]
    pub(crate) event: String,
    /// Charge through the payments service at this URL before hanging.
    #[arg(long)]
    pub(crate) payments: Option<String>,
}

/// Where the demo tells its crash consumer the database is.
pub(crate) const CRASH_CONSUMER_DATABASE_VAR: &str = "GUESTLIST_DEMO_DATABASE_URL";
