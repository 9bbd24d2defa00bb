//! How soon a request waiting on a key in flight (`in_flight_wait`) gets the first attempt's
//! answer: the time from the first attempt's answer (sent right after its commit) to the
//! waiter's, p50 and p99, with the waiter on another layer and store (`in_flight_wait`: as in
//! another process, woken by PostgreSQL's notice, or elsewhere by the 100 ms poll) and on the
//! same one (`in_flight_wait_same_process`: woken in memory).
//!
//! Each sample is one key: a first request whose handler takes 20 ms, and a second with the same
//! key sent 5 ms after it, which finds the key in flight and waits. Both are timed by the client
//! on one loopback; the waiter's answer can only follow the first's commit, so the gap between
//! the two answers bounds the wake-up from above.

use std::time::{Duration, Instant};

use axum::Router;
use axum::body::Bytes;
use axum::http::StatusCode;
use axum::routing::post;
use guestlist::SqlKeyStore;
use guestlist::http::{IdempotencyLayer, IdempotentTx};

use super::workload::HttpWorkload;
use crate::report::{Latency, Report};
use crate::requests::send;

/// How long the first attempt's handler takes.
const HANDLER: Duration = Duration::from_millis(20);
/// How long after the first request the waiter is sent.
const WAITER_AFTER: Duration = Duration::from_millis(5);

/// The handler of the first attempt: the row on the request's transaction, after a pause.
async fn slow<DB: HttpWorkload>(mut tx: IdempotentTx<DB>, body: Bytes) -> StatusCode {
    tokio::time::sleep(HANDLER).await;
    match DB::insert(&mut tx, &body).await {
        Ok(()) => StatusCode::CREATED,
        Err(_) => StatusCode::SERVICE_UNAVAILABLE,
    }
}

/// Measures `samples` waits on `keys` with the waiter on another layer and store (as in another
/// process: woken by the store's notice, or its poll), then `samples` with the waiter on the
/// first attempt's own layer (woken in memory); adds a row for each, and
/// `in_flight_wait_p99_ms_<backend>` (another process) and
/// `in_flight_wait_same_process_p99_ms_<backend>`.
pub(super) async fn measure<DB: HttpWorkload>(
    keys: SqlKeyStore<DB>,
    samples: usize,
    report: &mut Report,
) -> anyhow::Result<()> {
    let other = SqlKeyStore::with_table(keys.pool().clone(), keys.table().as_str())?;
    let layer = |keys| {
        let router = Router::new().route("/payments", post(slow::<DB>));
        router.layer(IdempotencyLayer::transactional(keys).in_flight_wait(Duration::from_secs(5)))
    };
    let url = super::serve(layer(keys)).await?;
    let elsewhere = super::serve(layer(other)).await?;
    for (name, waiter_url) in [
        ("in_flight_wait", &elsewhere),
        ("in_flight_wait_same_process", &url),
    ] {
        let (per_sec, latency) = waits(&url, waiter_url, name, samples).await?;
        report.key_by_key(name, DB::LABEL, per_sec, latency);
        report.record(
            &format!("{name}_p99_ms_{}", DB::LABEL),
            Some(latency.p99_ms),
        );
    }
    Ok(())
}

/// The handler of the first attempt in plain mode: a pause, and the answer (no database).
async fn slow_plain() -> StatusCode {
    tokio::time::sleep(HANDLER).await;
    StatusCode::CREATED
}

/// [`measure`] on Redis at `url`, in plain mode (the mode Redis serves): the waiter on another
/// layer and store, woken by the store's `PUBLISH`; adds the row and
/// `in_flight_wait_p99_ms_redis`.
pub(super) async fn measure_redis(
    url: &str,
    samples: usize,
    report: &mut Report,
) -> anyhow::Result<()> {
    use guestlist::redis::RedisKeyStore;
    let prefix = format!("bench-wait-{}", std::process::id());
    let layer = async |prefix: &str| -> anyhow::Result<String> {
        let keys = RedisKeyStore::connect(url).await?.prefix(prefix);
        let router = Router::new().route("/payments", post(slow_plain));
        let layer = IdempotencyLayer::new(keys).in_flight_wait(Duration::from_secs(5));
        super::serve(router.layer(layer)).await
    };
    let first = layer(&prefix).await?;
    let elsewhere = layer(&prefix).await?;
    let (per_sec, latency) = waits(&first, &elsewhere, "in_flight_wait", samples).await?;
    report.key_by_key("in_flight_wait", "redis", per_sec, latency);
    report.record("in_flight_wait_p99_ms_redis", Some(latency.p99_ms));
    Ok(())
}

/// `samples` keys, each first sent to `url` and waited on at `waiter_url`: keys a second, and
/// the gaps between the two answers.
async fn waits(
    url: &str,
    waiter_url: &str,
    name: &str,
    samples: usize,
) -> anyhow::Result<(f64, Latency)> {
    let client = reqwest::Client::new();
    let mut gaps = Vec::with_capacity(samples);
    let began = Instant::now();
    for n in 0..samples {
        let key = format!("{name}-{n}");
        let first = {
            let (client, url, key) = (client.clone(), url.to_owned(), key.clone());
            tokio::spawn(async move {
                send(&client, &url, Some(&key)).await?;
                anyhow::Ok(Instant::now())
            })
        };
        tokio::time::sleep(WAITER_AFTER).await;
        send(&client, waiter_url, Some(&key)).await?;
        let waiter_answered = Instant::now();
        let first_answered = first.await??;
        gaps.push(waiter_answered.saturating_duration_since(first_answered));
    }
    let per_sec = samples as f64 / began.elapsed().as_secs_f64();
    Ok((per_sec, Latency::of(&mut gaps)))
}
