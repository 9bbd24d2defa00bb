//! What the HTTP benches share: the request their load generator sends, the rounds that
//! interleave their figures, and how a figure's rounds become one row.

use std::future::Future;
use std::time::Duration;

use crate::measure::{Plan, load, median};
use crate::report::{Latency, Row};

/// Concurrent keep-alive connections of the load generator.
pub(crate) const CONNECTIONS: usize = 32;
/// Stored keys the replay figures cycle through.
pub(crate) const STORED_KEYS: u64 = 1_000;

/// The stored key that connection `worker` retries on its `n`th request.
pub(crate) fn stored_key(worker: usize, n: u64) -> String {
    format!("stored-{}", (worker as u64 * 31 + n) % STORED_KEYS)
}

/// A figure of an HTTP bench.
pub(crate) trait Figure: Copy + PartialEq + Send + Sync + 'static {
    /// Its name in the report.
    fn name(self) -> &'static str;
}

/// Measures `figures` round by round (in [`Plan::order`]) with [`CONNECTIONS`] connections in a
/// closed loop, `request(figure, round, connection, n)` sending each request; one row per figure.
pub(crate) async fn measure<F, R, Fut>(
    plan: Plan,
    figures: &[F],
    backend: &'static str,
    request: R,
) -> anyhow::Result<Vec<Row>>
where
    F: Figure,
    R: Fn(F, usize, usize, u64) -> Fut + Clone + Send + Sync + 'static,
    Fut: Future<Output = anyhow::Result<u64>> + Send,
{
    let mut samples: Vec<(F, f64, Vec<Duration>)> = Vec::new();
    for round in 0..plan.rounds {
        for figure in plan.order(round, figures) {
            let request = request.clone();
            let measured = load(CONNECTIONS, plan.each, move |worker, n| {
                request(figure, round, worker, n)
            })
            .await?;
            eprintln!(
                "  {:<15} round {round}  {:>8.0} req/s",
                figure.name(),
                measured.per_sec
            );
            samples.push((figure, measured.per_sec, measured.latencies));
        }
    }
    Ok(figures
        .iter()
        .map(|&figure| {
            let rounds = samples
                .iter()
                .filter(|(f, ..)| *f == figure)
                .map(|(_, rate, latencies)| (*rate, latencies.as_slice()));
            row(figure.name(), backend, rounds)
        })
        .collect())
}

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
fn row<'a>(
    name: &str,
    backend: &'static str,
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
        workers: CONNECTIONS,
        batch: 1,
        per_sec: median(rates),
        unit: "req/s",
        latency: Some(Latency::of(&mut latencies)),
    }
}
