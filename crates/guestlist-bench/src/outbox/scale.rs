//! Relays side by side on one outbox of 16 shards: four against one when each round waits on a
//! broker 5 ms away (NATS through a proxy that holds each chunk of its answers 5 ms, relays
//! taking rounds of 50), and two against one on the broker at hand, defaults kept.
//!
//! The relays start on the empty table and settle their shares first; then one statement
//! commits every message (on 400 keys, each row's slot computed as `Outbox::enqueue` computes
//! it), and the figure runs from that commit until the table is empty.

use std::time::{Duration, Instant};

use guestlist::sqlx::{self, PgPool};
use guestlist::{Outbox, Relay};
use guestlist_nats::JetStreamPublisher;
use guestlist_testkit::fault_proxy::FaultProxy;

use crate::broker::queues::Queue;

/// The outbox table the scale figures fill and drain.
const TABLE: &str = "bench_outbox_scale";

/// A broker's round trip, in the slow figures.
const FAR: Duration = Duration::from_millis(5);

/// The scale figures' messages per second: `(relays, far, rate)` for one and four relays on the
/// broker 5 ms away, one and two at hand.
pub(crate) async fn measure(
    database: &str,
    nats_url: &str,
    messages: usize,
) -> anyhow::Result<Vec<(usize, bool, f64)>> {
    // Room for four relays' connections (a round's, a stamp's, a renewal's, a LISTEN each).
    let pool = &sqlx::postgres::PgPoolOptions::new()
        .max_connections(32)
        .connect(database)
        .await?;
    let outbox = Outbox::<sqlx::Postgres>::with_table(TABLE)?;
    let host = nats_url.trim_start_matches("nats://");
    let proxy = FaultProxy::to(host).await;
    proxy.delay(FAR);
    let far_url = format!("nats://{}", proxy.addr());
    let mut rates = Vec::new();
    for (relays, far) in [(1, true), (4, true), (1, false), (2, false)] {
        let queue = Queue::nats(nats_url, "bench_outbox_scale").await?;
        fresh(pool, &outbox).await?;
        let url = if far { far_url.as_str() } else { nats_url };
        let (stop, stopped) = tokio::sync::watch::channel(false);
        let mut tasks = Vec::new();
        for n in 0..relays {
            let publisher = JetStreamPublisher::builder(url).connect().await?;
            let mut relay = Relay::new(outbox.clone(), pool.clone(), publisher)
                .holder(format!("bench-relay-{n}"))
                .lease(Duration::from_secs(2))
                .poll(Duration::from_millis(5));
            if far {
                relay = relay.batch(50);
            }
            let mut stopped = stopped.clone();
            tasks.push(tokio::spawn(async move {
                relay
                    .run(async move {
                        let _ = stopped.wait_for(|stop| *stop).await;
                    })
                    .await
            }));
        }
        settled(pool, &outbox, relays).await?;
        let started = fill(pool, messages, &queue.topic()).await?;
        while pending(pool).await? > 0 {
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        let rate = messages as f64 / started.elapsed().as_secs_f64();
        stop.send_replace(true);
        for task in tasks {
            task.await??;
        }
        queue.remove().await?;
        eprintln!(
            "  {relays} relay(s), broker {}: {rate:.0} msgs/s",
            if far { "5 ms away" } else { "at hand" }
        );
        rates.push((relays, far, rate));
    }
    Ok(rates)
}

/// The scale table made anew, with its 16 shards.
async fn fresh(pool: &PgPool, outbox: &Outbox<sqlx::Postgres>) -> anyhow::Result<()> {
    for suffix in ["_keys", "_relay", "_relays", "_dead", ""] {
        sqlx::query(sqlx::AssertSqlSafe(format!(
            "DROP TABLE IF EXISTS {TABLE}{suffix}"
        )))
        .execute(pool)
        .await?;
    }
    outbox.migrate(pool).await?;
    Ok(())
}

/// Waits until each of `relays` holds its share of the shards.
async fn settled(
    pool: &PgPool,
    outbox: &Outbox<sqlx::Postgres>,
    relays: usize,
) -> anyhow::Result<()> {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let stats = outbox.stats(pool).await?;
        let shares: Vec<usize> = stats.relays.iter().map(|r| r.shards.len()).collect();
        let fair = 16 / relays;
        if shares.len() == relays && shares.iter().all(|held| *held == fair) {
            return Ok(());
        }
        anyhow::ensure!(
            Instant::now() < deadline,
            "the relays never settled their shares: {shares:?}"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// Commits `messages` rows on 400 keys in one statement; the moment it committed.
async fn fill(pool: &PgPool, messages: usize, topic: &str) -> anyhow::Result<Instant> {
    let keys = 400;
    let text = format!(
        "INSERT INTO {TABLE} (message_id, topic, ordering_key, seq, payload, slot) \
         SELECT 'evt_' || n, $1, 'order-' || (n % {keys}), n / {keys} + 1, \
         convert_to('{{\"n\":' || n || '}}', 'UTF8'), \
         ('x' || substr(encode(sha256(convert_to('order-' || (n % {keys}), 'UTF8')), 'hex'), \
         1, 4))::bit(16)::int \
         FROM generate_series(0, $2 - 1) AS n"
    );
    // Analyzed on the same transaction: the relays plan their reads on a table that holds the
    // rows (autovacuum would, in a service), not on the empty one they started on.
    let mut tx = pool.begin().await?;
    sqlx::query(sqlx::AssertSqlSafe(text))
        .bind(topic)
        .bind(i64::try_from(messages)?)
        .execute(&mut *tx)
        .await?;
    sqlx::query(sqlx::AssertSqlSafe(format!("ANALYZE {TABLE}")))
        .execute(&mut *tx)
        .await?;
    tx.commit().await?;
    Ok(Instant::now())
}

async fn pending(pool: &PgPool) -> anyhow::Result<i64> {
    let count: i64 =
        sqlx::query_scalar(sqlx::AssertSqlSafe(format!("SELECT count(*) FROM {TABLE}")))
            .fetch_one(pool)
            .await?;
    Ok(count)
}
