//! How soon a request waiting on a key in flight (`in_flight_wait`) gets the first attempt's
//! answer: `in_flight_wait_ms`, the time from the first attempt's answer (sent right after its
//! commit) to the waiter's, p50 and p99.
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
use crate::report::{Latency, Report, Row};
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

/// Measures `samples` waits on `keys` and adds the row and `in_flight_wait_p99_ms_<backend>`.
pub(super) async fn measure<DB: HttpWorkload>(
    keys: SqlKeyStore<DB>,
    samples: usize,
    report: &mut Report,
) -> anyhow::Result<()> {
    let router = Router::new()
        .route("/payments", post(slow::<DB>))
        .layer(IdempotencyLayer::transactional(keys).in_flight_wait(Duration::from_secs(5)));
    let url = super::serve(router).await?;
    let client = reqwest::Client::new();
    let mut gaps = Vec::with_capacity(samples);
    let began = Instant::now();
    for n in 0..samples {
        let key = format!("wait-{n}");
        let first = {
            let (client, url, key) = (client.clone(), url.clone(), key.clone());
            tokio::spawn(async move {
                send(&client, &url, Some(&key)).await?;
                anyhow::Ok(Instant::now())
            })
        };
        tokio::time::sleep(WAITER_AFTER).await;
        send(&client, &url, Some(&key)).await?;
        let waiter_answered = Instant::now();
        let first_answered = first.await??;
        gaps.push(waiter_answered.saturating_duration_since(first_answered));
    }
    let per_sec = samples as f64 / began.elapsed().as_secs_f64();
    let latency = Latency::of(&mut gaps);
    report.rows.push(Row {
        name: "in_flight_wait".to_owned(),
        backend: DB::LABEL,
        workers: 1,
        batch: 1,
        per_sec,
        unit: "keys/s",
        latency: Some(latency),
    });
    report.record(
        &format!("in_flight_wait_p99_ms_{}", DB::LABEL),
        Some(latency.p99_ms),
    );
    Ok(())
}
