//! How long a message takes from its publish to its commit when traffic is thin (10 a second),
//! through the consumer with no settings: it must not wait for a batch to fill.
//!
//! The handler's transaction sends a PostgreSQL notification with the event's id; PostgreSQL
//! delivers notifications when the transaction commits, so its arrival times the commit.

use std::collections::HashMap;
use std::time::{Duration, Instant};

use guestlist::sqlx::{self, PgConnection, PgPool};
use guestlist::{HandlerName, Inbox};
use guestlist_consumer::{Consumer, IdFrom, Message, Source};

use super::queues::{Queue, with_source};
use super::work;
use crate::report::Latency;

/// The notification channel the handler's commit signals on.
const CHANNEL: &str = "bench_broker_committed";

/// Publishes `count` events to `queue` at `per_sec`, consumes them with the default consumer,
/// and returns the percentiles of publish-to-commit.
pub(super) async fn measure(
    queue: &Queue,
    pool: &PgPool,
    inbox: &Inbox<sqlx::Postgres>,
    count: usize,
    per_sec: u32,
) -> anyhow::Result<Latency> {
    let mut listener = sqlx::postgres::PgListener::connect_with(pool).await?;
    listener.listen(CHANNEL).await?;
    let (noted, mut notes) = tokio::sync::mpsc::unbounded_channel();
    let listening = tokio::spawn(async move {
        while let Ok(note) = listener.recv().await {
            let _ = noted.send((note.payload().to_owned(), Instant::now()));
        }
    });
    let source = queue.source(200).await?;
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let consumer = with_source!(source, |source| tokio::spawn(consume(
        source,
        pool.clone(),
        inbox.clone(),
        stopped
    )));
    let mut published = HashMap::with_capacity(count);
    let mut ticks = tokio::time::interval(Duration::from_secs(1) / per_sec);
    for n in 0..count {
        ticks.tick().await;
        let id = format!("evt_{}", 1_000_000 + n);
        published.insert(id.clone(), Instant::now());
        queue.publish_one(&id).await?;
    }
    let mut committed = HashMap::with_capacity(count);
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    while committed.len() < count {
        match tokio::time::timeout_at(deadline, notes.recv()).await {
            Ok(Some((id, at))) => {
                committed.insert(id, at);
            }
            _ => break,
        }
    }
    listening.abort();
    let _ = stop.send(());
    consumer.await??;
    anyhow::ensure!(
        committed.len() == count,
        "{} of {count} events committed",
        committed.len()
    );
    let mut millis: Vec<f64> = committed
        .iter()
        .map(|(id, at)| at.duration_since(published[id]).as_secs_f64() * 1000.0)
        .collect();
    millis.sort_by(f64::total_cmp);
    let at =
        |q: f64| millis[((millis.len() as f64 * q).ceil() as usize).clamp(1, millis.len()) - 1];
    Ok(Latency {
        p50_ms: at(0.50),
        p99_ms: at(0.99),
    })
}

/// The consumer with no settings; its handler's commit notifies [`CHANNEL`].
async fn consume<S: Source>(
    source: S,
    pool: PgPool,
    inbox: Inbox<sqlx::Postgres>,
    stopped: tokio::sync::oneshot::Receiver<()>,
) -> anyhow::Result<()> {
    Consumer::new(
        source,
        pool,
        inbox,
        HandlerName::new("warehouse")?,
        IdFrom::JsonField("/id".into()),
        async |tx: &mut PgConnection, message: &Message| {
            work(tx, message.id.as_str()).await?;
            sqlx::query("SELECT pg_notify($1, $2)")
                .bind(CHANNEL)
                .bind(message.id.as_str())
                .execute(&mut *tx)
                .await?;
            Ok::<_, sqlx::Error>(())
        },
    )
    .run(async move {
        let _ = stopped.await;
    })
    .await?;
    Ok(())
}
