//! What the HTTP benches share: the request their load generator sends, and how a figure's
//! rounds become one row.

use std::time::Duration;

use crate::measure::{median, percentile_ms};
use crate::report::{Latency, Row};

/// What every request sends: a payment, as a client would.
const BODY: &[u8] = br#"{"amount":100,"currency":"eur","customer":"cus_9f3k"}"#;

/// One `POST` to `url`, keyed when `key` is given; fails unless the answer is 201 (a first run
/// or a replay). The body is read: an answer is only done once its body has arrived.
pub(crate) async fn send(
    client: &reqwest::Client,
    url: &str,
    key: Option<&str>,
) -> anyhow::Result<u64> {
    let mut request = client
        .post(url)
        .header("authorization", "Bearer bench")
        .body(BODY);
    if let Some(key) = key {
        request = request.header("idempotency-key", key);
    }
    let response = request.send().await?;
    anyhow::ensure!(
        response.status() == reqwest::StatusCode::CREATED,
        "{url}: {} {}",
        response.status(),
        response.text().await.unwrap_or_default()
    );
    response.bytes().await?;
    Ok(1)
}

/// The row of a request figure measured in `rounds` (requests per second, and every request's
/// latency): the median rate, and percentiles over all latencies.
pub(crate) fn row<'a>(
    name: &str,
    backend: &'static str,
    connections: usize,
    rounds: impl Iterator<Item = (f64, &'a [Duration])>,
) -> Row {
    let (mut rates, mut latencies) = (Vec::new(), Vec::new());
    for (rate, round) in rounds {
        rates.push(rate);
        latencies.extend_from_slice(round);
    }
    Row {
        name: name.to_owned(),
        backend,
        workers: connections,
        batch: 1,
        per_sec: median(rates),
        unit: "req/s",
        latency: Some(Latency {
            p50_ms: percentile_ms(&mut latencies, 0.5),
            p99_ms: percentile_ms(&mut latencies, 0.99),
        }),
    }
}
