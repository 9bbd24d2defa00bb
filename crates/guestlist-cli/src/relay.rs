//! `guestlist relay`: publishes an outbox table's committed messages to NATS JetStream,
//! RabbitMQ, Kafka or Amazon SQS, for services in any language that write the table.

use std::net::SocketAddr;
use std::time::Duration;

use clap::Args;
use guestlist::sqlx::Pool;
use guestlist::{Backend, Outbox, Relay, outbox::Publish};

use crate::broker::{BrokerArgs, with_publisher};
use crate::database::{self, DatabaseUrl, with_pool};
use crate::signal::Terminated;

#[derive(Debug, Args)]
pub(crate) struct RelayArgs {
    #[command(flatten)]
    database: DatabaseUrl,
    /// The outbox table (create it with `guestlist migrate --outbox`).
    #[arg(
        long = "outbox-table",
        alias = "table",
        default_value = "guestlist_outbox"
    )]
    table: String,
    #[command(flatten)]
    broker: BrokerArgs,
    /// The RabbitMQ exchange; the topic is the routing key. The default exchange ("") routes to
    /// the queue named by the topic.
    #[arg(long, default_value = "", requires = "amqp")]
    exchange: String,
    /// Messages per round: published together, confirmed together, stamped together.
    #[arg(long, default_value_t = 500)]
    batch: usize,
    /// How long a crashed relay keeps a standing-by one waiting.
    #[arg(long, value_parser = humantime::parse_duration, default_value = "10s")]
    lease: Duration,
    /// How often an idle relay looks for messages without being woken (PostgreSQL wakes it on
    /// commit; SQLite and MySQL rely on this).
    #[arg(long, value_parser = humantime::parse_duration, default_value = "500ms")]
    poll: Duration,
    /// The name this relay holds the lease under, shown by `guestlist stats`; give each relay
    /// its own (defaults to relay-<pid>-<random>).
    #[arg(long)]
    holder: Option<String>,
    /// Refusals of one message (no queue or stream takes its topic) before it moves to the
    /// outgoing dead letters (`guestlist outbox dead list`); a message the broker can never
    /// take (too large, an id it cannot carry) goes there at once.
    #[arg(long, default_value_t = 10)]
    max_attempts: u32,
    /// How long a round waits for the broker's confirmations before it counts the rest as an
    /// outage (the next rounds then take fewer messages).
    #[arg(long, value_parser = humantime::parse_duration, default_value = "45s")]
    confirm_timeout: Duration,
    /// How long the relay may take to stop once asked (SIGTERM, Ctrl-C): the batch in hand
    /// stamped, the lease given up. Past it, as when the database or the broker stopped
    /// answering, it exits where it stands: its lease expires by itself and what it had not
    /// stamped is published again. Keep it under the orchestrator's wait before SIGKILL.
    #[arg(long, value_parser = humantime::parse_duration, default_value = "10s")]
    shutdown_grace: Duration,
    /// Where /metrics (Prometheus text), /healthz (the database answers) and /readyz (no
    /// outage of the broker or the database under way) listen; off unless set.
    #[arg(long)]
    metrics_listen: Option<SocketAddr>,
    /// Keep each published message's row, stamped with when it went out, until `guestlist
    /// purge --outbox` deletes it by age (default: delete it once the broker confirmed it).
    /// Kept rows show what was published and when, and make an enqueue retried after its
    /// message went out add nothing; they cost the database a second row version per message.
    #[arg(long)]
    keep_published: bool,
}

pub(crate) async fn run(args: RelayArgs) -> anyhow::Result<()> {
    let terminated = Terminated::install()?;
    // Which broker, before anything is opened: a missing one is the first thing to hear.
    args.broker.broker(&args.exchange)?;
    let pool = database::connect_existing(&args.database, 5).await?;
    with_pool!(pool, |pool| relay(pool, &args, terminated).await)
}

async fn relay<DB: Backend>(
    pool: Pool<DB>,
    args: &RelayArgs,
    terminated: Terminated,
) -> anyhow::Result<()> {
    let outbox = Outbox::<DB>::with_table(&args.table)?;
    // A missing table fails here, with what to do, rather than round after round.
    let stats = outbox.stats(&pool).await?;
    tracing::info!(table = %args.table, pending = stats.pending, "outbox found");
    with_publisher!(args.broker.broker(&args.exchange)?, |publisher| {
        publish(pool, outbox, publisher, args, terminated).await
    }, unused: terminated)
}

#[cfg_attr(
    not(any(feature = "nats", feature = "amqp", feature = "kafka", feature = "sqs")),
    allow(dead_code)
)]
async fn publish<DB: Backend, P: Publish>(
    pool: Pool<DB>,
    outbox: Outbox<DB>,
    publisher: P,
    args: &RelayArgs,
    terminated: Terminated,
) -> anyhow::Result<()> {
    let (stop, stopped) = tokio::sync::watch::channel(false);
    let mut relay = Relay::new(outbox, pool.clone(), publisher)
        .batch(args.batch)
        .lease(args.lease)
        .poll(args.poll)
        .max_attempts(args.max_attempts)
        .confirm_timeout(args.confirm_timeout)
        .shutdown_grace(args.shutdown_grace)
        .keep_published(args.keep_published);
    if let Some(addr) = args.metrics_listen {
        let mut stopped = stopped.clone();
        crate::ops::serve(addr, pool, Some(relay.health()), async move {
            let _ = stopped.wait_for(|stop| *stop).await;
        })
        .await?;
    }
    if let Some(holder) = &args.holder {
        relay = relay.holder(holder.clone());
    }
    println!(
        "relaying {} on {} to {}",
        args.table,
        database::redact(&args.database),
        args.broker.broker(&args.exchange)?
    );
    let relayed = relay.run(terminated.wait()).await?;
    let _ = stop.send(true);
    println!(
        "stopped: published {} ({} dropped by the broker as repeats), {} publishes unconfirmed, {} dead-lettered, lease taken {} times",
        relayed.published,
        relayed.duplicates,
        relayed.failures,
        relayed.dead_lettered,
        relayed.leases_taken
    );
    Ok(())
}
