//! The price of the relay's per-key order, on NATS JetStream: a round sends a key's next message
//! only once the broker confirmed the one before (`relay_1000_keys`, `relay_hot_key`), against
//! the same relay pipelining a key's messages (`Relay::pipeline_keys`: `…_pipelined`). Spread
//! over 1,000 keys, a round of 500 rarely holds two messages of a key; on one hot key, every
//! message of a round waits for the one before. The hot key's figures drain fewer messages.

use std::time::Instant;

use guestlist::sqlx::{self, PgPool};
use guestlist::{Outbox, Relay};
use guestlist_nats::JetStreamPublisher;

use super::preload;
use crate::Common;
use crate::broker::queues::Queue;
use crate::measure::{Plan, median_of};
use crate::report::{Report, Row};

/// An order figure: how many keys, and whether the relay pipelines a key's messages.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Figure {
    keys: usize,
    pipelined: bool,
}

impl Figure {
    const ALL: [Figure; 4] = [
        Figure::of(1_000, false),
        Figure::of(1_000, true),
        Figure::of(1, false),
        Figure::of(1, true),
    ];

    const fn of(keys: usize, pipelined: bool) -> Self {
        Self { keys, pipelined }
    }

    fn name(self) -> String {
        let keys = match self.keys {
            1 => "hot_key".to_owned(),
            n => format!("{n}_keys"),
        };
        let pipelined = if self.pipelined { "_pipelined" } else { "" };
        format!("relay_{keys}{pipelined}")
    }
}

/// Measures the order figures into `report`.
pub(super) async fn measure(
    pool: &PgPool,
    outbox: &Outbox<sqlx::Postgres>,
    nats_url: &str,
    common: &Common,
    report: &mut Report,
) -> anyhow::Result<()> {
    const LABEL: &str = "nats_postgres";
    let plan = Plan::of(common);
    let (spread, hot) = if common.quick {
        (30_000, 2_000)
    } else {
        (100_000, 5_000)
    };
    let mut samples: Vec<(Figure, f64)> = Vec::new();
    for round in 0..plan.rounds {
        for figure in plan.order(round, &Figure::ALL) {
            let messages = if figure.keys == 1 { hot } else { spread };
            let queue =
                Queue::nats(nats_url, &format!("bench_outbox_{}_{round}", figure.name())).await?;
            preload(pool, &queue.topic(), messages, figure.keys).await?;
            let publisher = JetStreamPublisher::builder(nats_url).connect().await?;
            let relay =
                Relay::new(outbox.clone(), pool.clone(), publisher).pipeline_keys(figure.pipelined);
            let started = Instant::now();
            let relayed = relay
                .drain()
                .await?
                .ok_or_else(|| anyhow::anyhow!("another relay holds the bench's lease"))?;
            let rate = messages as f64 / started.elapsed().as_secs_f64();
            anyhow::ensure!(
                relayed.published as usize == messages,
                "{}: the relay published {} of {messages}",
                figure.name(),
                relayed.published
            );
            queue.remove().await?;
            eprintln!("  {:<26} round {round}  {rate:>9.0} msgs/s", figure.name());
            samples.push((figure, rate));
        }
    }
    for figure in Figure::ALL {
        report.rows.push(Row {
            name: figure.name(),
            backend: LABEL,
            workers: 1,
            batch: Relay::<sqlx::Postgres, JetStreamPublisher>::DEFAULT_BATCH,
            per_sec: median_of(&samples, &figure),
            unit: "msgs/s",
            latency: None,
        });
    }
    for (keys, name) in [
        (
            "1000_keys",
            "relay_strict_order_vs_pipelined_1000_keys_nats",
        ),
        ("hot_key", "relay_strict_order_vs_pipelined_hot_key_nats"),
    ] {
        let ratio = report.quotient(
            &format!("relay_{keys}"),
            &format!("relay_{keys}_pipelined"),
            LABEL,
            1,
        );
        report.record(name, ratio);
    }
    Ok(())
}
