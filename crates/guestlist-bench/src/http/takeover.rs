//! How soon a key held by a process that was killed gets its answer:
//! `crashed_holder_to_takeover_ms`, from a SIGKILL of the process whose handler holds the key
//! (transactional mode) to the first 2xx of a client retrying every 100 ms on another process.
//!
//! Each sample starts this binary again as `guestlist-bench hold-key`, a server of the same
//! layer on the same key table whose handler writes its row and hangs; sends it a keyed request;
//! kills it once the handler hangs; and retries the key on this process's layer.

use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use axum::Router;
use axum::body::Bytes;
use axum::http::StatusCode;
use axum::routing::post;
use guestlist::SqlKeyStore;
use guestlist::http::{IdempotencyLayer, IdempotentTx};
use guestlist::sqlx::{PgPool, Postgres};

use super::workload::{HttpWorkload, KEYS};
use crate::report::{Latency, Report};
use crate::requests::send;

/// What the holder prints once it listens, and once its handler wrote its row and hangs.
const LISTENING: &str = "LISTENING ON";
const HANGING: &str = "HANDLER WROTE ITS ROW AND HANGS";
/// How often the client retries, as the clients do.
const RETRY_EVERY: Duration = Duration::from_millis(100);
/// When a sample gives up: the lease (30 s) and more.
const GIVE_UP: Duration = Duration::from_secs(45);

/// The handler of the process to be killed: the row on the request's transaction, then a hang.
async fn hang(mut tx: IdempotentTx<Postgres>, body: Bytes) -> StatusCode {
    if Postgres::insert(&mut tx, &body).await.is_err() {
        return StatusCode::SERVICE_UNAVAILABLE;
    }
    println!("{HANGING}");
    std::future::pending().await
}

/// The handler of the retries: the row on the request's transaction.
async fn write(mut tx: IdempotentTx<Postgres>, body: Bytes) -> StatusCode {
    match Postgres::insert(&mut tx, &body).await {
        Ok(()) => StatusCode::CREATED,
        Err(_) => StatusCode::SERVICE_UNAVAILABLE,
    }
}

/// `guestlist-bench hold-key`: serves the layer in transactional mode on `database` with the
/// hanging handler, until killed.
pub(crate) async fn hold_key(database: &str) -> anyhow::Result<()> {
    let pool = PgPool::connect(database).await?;
    let keys = SqlKeyStore::with_table(pool, KEYS)?;
    let router = Router::new()
        .route("/payments", post(hang))
        .layer(IdempotencyLayer::transactional(keys));
    let url = super::serve(router).await?;
    println!("{LISTENING} {url}");
    std::future::pending().await
}

/// Measures `samples` take-overs on `keys` (PostgreSQL at `database`) and adds the row and
/// `crashed_holder_to_takeover_ms_postgres` (the slowest sample).
pub(super) async fn measure(
    keys: SqlKeyStore<Postgres>,
    database: &str,
    samples: usize,
    report: &mut Report,
) -> anyhow::Result<()> {
    let router = Router::new()
        .route("/payments", post(write))
        .layer(IdempotencyLayer::transactional(keys));
    let url = super::serve(router).await?;
    let client = reqwest::Client::new();
    let mut takeovers = Vec::with_capacity(samples);
    let began = Instant::now();
    for n in 0..samples {
        let key = format!("crashed-{n}-{}", std::process::id());
        let killed = kill_holding(&client, database, &key).await?;
        loop {
            if send(&client, &url, Some(&key)).await.is_ok() {
                break;
            }
            anyhow::ensure!(
                killed.elapsed() < GIVE_UP,
                "no answer for {key} {GIVE_UP:?} after its holder was killed"
            );
            tokio::time::sleep(RETRY_EVERY).await;
        }
        takeovers.push(killed.elapsed());
    }
    let per_sec = samples as f64 / began.elapsed().as_secs_f64();
    let latency = Latency::of(&mut takeovers.clone());
    let slowest = takeovers.iter().max().copied().unwrap_or_default();
    report.key_by_key(
        "crashed_holder_to_takeover",
        Postgres::LABEL,
        per_sec,
        latency,
    );
    report.record(
        "crashed_holder_to_takeover_ms_postgres",
        Some(slowest.as_secs_f64() * 1e3),
    );
    Ok(())
}

/// Starts a holder, has its handler hold `key`, and SIGKILLs it: when.
async fn kill_holding(
    client: &reqwest::Client,
    database: &str,
    key: &str,
) -> anyhow::Result<Instant> {
    let mut holder = Command::new(std::env::current_exe()?)
        .args(["hold-key", "--database", database])
        .stdout(Stdio::piped())
        .spawn()?;
    let stdout = holder.stdout.take().expect("piped");
    let (url, lines) = tokio::task::spawn_blocking(move || {
        let mut lines = BufReader::new(stdout).lines();
        let url = lines.by_ref().map_while(Result::ok).find_map(|line| {
            line.strip_prefix(LISTENING)
                .map(|url| url.trim().to_owned())
        });
        (url, lines)
    })
    .await?;
    let Some(url) = url else {
        let _ = holder.kill();
        anyhow::bail!("the holder process did not start");
    };
    let request = {
        let (client, key) = (client.clone(), key.to_owned());
        tokio::spawn(async move { send(&client, &url, Some(&key)).await })
    };
    let hanging = tokio::task::spawn_blocking(move || {
        lines
            .map_while(Result::ok)
            .any(|line| line.contains(HANGING))
    })
    .await?;
    holder.kill()?;
    holder.wait()?;
    let killed = Instant::now();
    request.abort();
    anyhow::ensure!(hanging, "the holder's handler did not take the key");
    Ok(killed)
}
