//! What the HTTP benches share: the request their load generator sends, the rounds that
//! interleave their figures, and how a figure's rounds become one row.

use std::future::Future;
use std::time::Duration;

use crate::cpu::CpuClock;
use crate::measure::{Plan, load, median};
use crate::report::{Latency, Report, Row};

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
/// closed loop, `request(figure, round, connection, n)` sending each request: a row per figure
/// (and one of its CPU per request) in `report`, with its rate round by round.
pub(crate) async fn measure<F, R, Fut>(
    plan: Plan,
    figures: &[F],
    backend: &'static str,
    request: R,
    report: &mut Report,
) -> anyhow::Result<()>
where
    F: Figure,
    R: Fn(F, usize, usize, u64) -> Fut + Clone + Send + Sync + 'static,
    Fut: Future<Output = anyhow::Result<u64>> + Send,
{
    measure_settled(plan, figures, backend, request, async || Ok(()), report).await
}

/// [`measure`], with `settle` run before each figure's load and outside its clock: a database
/// checkpoint, so that no figure pays for flushing what the one before it wrote.
pub(crate) async fn measure_settled<F, R, Fut>(
    plan: Plan,
    figures: &[F],
    backend: &'static str,
    request: R,
    settle: impl AsyncFn() -> anyhow::Result<()>,
    report: &mut Report,
) -> anyhow::Result<()>
where
    F: Figure,
    R: Fn(F, usize, usize, u64) -> Fut + Clone + Send + Sync + 'static,
    Fut: Future<Output = anyhow::Result<u64>> + Send,
{
    let mut samples: Vec<(F, f64, Option<f64>, Vec<Duration>)> = Vec::new();
    for round in 0..plan.rounds {
        for figure in plan.order(round, figures) {
            settle().await?;
            let request = request.clone();
            let cpu = CpuClock::now();
            let measured = load(CONNECTIONS, plan.each, move |worker, n| {
                request(figure, round, worker, n)
            })
            .await?;
            // The machine's CPU per request (server, client and database together).
            let requests = measured.latencies.len() as f64;
            let cpu = cpu
                .and_then(|cpu| cpu.busy_since())
                .filter(|_| requests > 0.0)
                .map(|secs| secs * 1e6 / requests);
            let cpu_text = cpu.map_or_else(String::new, |us| format!("  {us:>6.0} CPU µs/req"));
            eprintln!(
                "  {:<15} round {round}  {:>8.0} req/s{cpu_text}",
                figure.name(),
                measured.per_sec
            );
            samples.push((figure, measured.per_sec, cpu, measured.latencies));
        }
    }
    for &figure in figures {
        let of = || samples.iter().filter(move |(f, ..)| *f == figure);
        let rates = of().map(|(_, rate, ..)| *rate).collect();
        report
            .rounds
            .insert((figure.name().to_owned(), backend.to_owned()), rates);
        let rounds = of().map(|(_, rate, _, latencies)| (*rate, latencies.as_slice()));
        report.rows.push(row(figure.name(), backend, rounds));
        let cpu: Vec<f64> = of().filter_map(|(_, _, cpu, _)| *cpu).collect();
        if !cpu.is_empty() {
            report.rows.push(Row {
                name: format!("{}_cpu", figure.name()),
                backend,
                workers: CONNECTIONS,
                batch: 1,
                per_sec: median(cpu),
                unit: "CPU µs/req",
                latency: None,
            });
        }
    }
    Ok(())
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
