//! The figures only the programs count, in their Prometheus metrics: duplicates absorbed,
//! messages deferred behind their key, responses replayed, requests answered 409. No table
//! keeps them (a duplicate leaves no row; a replay changes none), so the console reads them from
//! the programs' `/metrics` (`--metrics-from`) each time it samples, and draws each minute's
//! increase. A program that restarted counts from 0 again, and is read so.

use std::collections::BTreeMap;
use std::sync::{Mutex, PoisonError};
use std::time::{Duration, Instant};

use super::activity::{self, Lines};
use super::chart::Span;
use super::exposition;
use super::samples::MINUTES_KEPT;

/// How long one endpoint gets to answer.
const READ_WAIT: Duration = Duration::from_secs(2);

/// Reads closer together than this are one read: every browser refreshes the page every few
/// seconds.
const READ_EVERY: Duration = Duration::from_secs(5);

/// Where a chart's lines come from: a counter's samples of one `outcome`, a line per handler
/// or one line of its own name.
struct Figure {
    chart: &'static str,
    metric: &'static str,
    outcome: &'static str,
    line: Line,
}

/// How a figure's samples make lines.
enum Line {
    /// One line per `handler` label.
    ByHandler,
    /// One line of this name, every sample added up.
    Named(&'static str),
}

/// The charts drawn from the metrics: (title, id), in the page's order.
pub(crate) const CHARTS: [(&str, &str); 3] = [
    (
        "Duplicates absorbed per minute, by handler",
        "chart-duplicates",
    ),
    (
        "Messages deferred behind their key per minute, by handler",
        "chart-deferred",
    ),
    (
        "Idempotency keys replayed and answered 409 per minute",
        "chart-replays",
    ),
];

const FIGURES: [Figure; 4] = [
    Figure {
        chart: "chart-duplicates",
        metric: "guestlist_inbox_claims_total",
        outcome: "duplicate",
        line: Line::ByHandler,
    },
    Figure {
        chart: "chart-deferred",
        metric: "guestlist_consumer_messages_total",
        outcome: "deferred",
        line: Line::ByHandler,
    },
    Figure {
        chart: "chart-replays",
        metric: "guestlist_http_requests_total",
        outcome: "replayed",
        line: Line::Named("replayed"),
    },
    Figure {
        chart: "chart-replays",
        metric: "guestlist_http_requests_total",
        outcome: "conflict_in_flight",
        line: Line::Named("answered 409"),
    },
];

/// A line of a chart: (chart id, line name).
type LineKey = (&'static str, String);

/// The programs' metrics read so far.
pub(crate) struct Scraped {
    from: Vec<reqwest::Url>,
    http: reqwest::Client,
    /// Held through a read, so that two reads never take the same increase twice.
    reading: tokio::sync::Mutex<Option<Instant>>,
    counts: Mutex<Counts>,
}

/// What the reads gave.
#[derive(Default)]
struct Counts {
    /// Each endpoint's totals at its last read (`None`: never read).
    last: Vec<Option<BTreeMap<LineKey, u64>>>,
    /// Each line's increase by Unix minute.
    per_minute: BTreeMap<LineKey, BTreeMap<i64, u64>>,
    /// The first minute an endpoint was read.
    first: Option<i64>,
    /// Each endpoint's trouble at its last read.
    trouble: Vec<Option<String>>,
}

/// The charts drawn from the metrics over a span, for the page.
pub(crate) struct Drawn {
    /// (title, id, lines) of each chart that has lines.
    pub(crate) charts: Vec<(&'static str, &'static str, Lines)>,
    /// How many endpoints are read (0: `--metrics-from` was not given).
    pub(crate) endpoints: usize,
    /// The first minute read, if any.
    pub(crate) first: Option<i64>,
    /// What the last read of an endpoint met, for each that failed.
    pub(crate) trouble: Vec<String>,
}

impl Scraped {
    /// Reads the metrics at `from` (none: nothing is read, and the page says how to).
    pub(crate) fn new(from: Vec<reqwest::Url>) -> Self {
        let counts = Counts {
            last: vec![None; from.len()],
            trouble: vec![None; from.len()],
            ..Counts::default()
        };
        Self {
            from,
            http: reqwest::Client::builder()
                .timeout(READ_WAIT)
                .build()
                .unwrap_or_default(),
            reading: tokio::sync::Mutex::new(None),
            counts: Mutex::new(counts),
        }
    }

    /// Reads every endpoint once, taking each line's increase since the last read into
    /// `minute` (a Unix minute).
    pub(crate) async fn read(&self, minute: i64) {
        let mut reading = self.reading.lock().await;
        if reading.is_some_and(|at| at.elapsed() < READ_EVERY) {
            return;
        }
        *reading = Some(Instant::now());
        for (n, url) in self.from.iter().enumerate() {
            let text = match self.fetch(url).await {
                Ok(text) => text,
                Err(err) => {
                    self.lock().trouble[n] = Some(format!("{url}: {err}"));
                    continue;
                }
            };
            self.lock().take(n, totals(&text), minute);
        }
    }

    async fn fetch(&self, url: &reqwest::Url) -> Result<String, reqwest::Error> {
        self.http
            .get(url.clone())
            .send()
            .await?
            .error_for_status()?
            .text()
            .await
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Counts> {
        self.counts.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// The charts over `span` up to `now` (a Unix minute).
    pub(crate) fn drawn(&self, span: Span, now: i64) -> Drawn {
        let counts = self.lock();
        let charts = CHARTS
            .iter()
            .filter_map(|(title, id)| {
                let counted = counts
                    .per_minute
                    .iter()
                    .filter(|((chart, _), _)| chart == id)
                    .flat_map(|((_, line), minutes)| {
                        minutes.iter().map(|(m, n)| (line.as_str(), *m, *n))
                    });
                let lines = activity::lines(counted, span, now, *id != "chart-replays");
                (!lines.is_empty()).then_some((*title, *id, lines))
            })
            .collect();
        Drawn {
            charts,
            endpoints: self.from.len(),
            first: counts.first,
            trouble: counts.trouble.iter().flatten().cloned().collect(),
        }
    }
}

impl Counts {
    /// Takes endpoint `n`'s `totals`, read in `minute`: the first read is where counting
    /// starts; a line that appears counts from 0, and a total lower than the last one is a
    /// program that restarted and counts from 0 too.
    fn take(&mut self, n: usize, totals: BTreeMap<LineKey, u64>, minute: i64) {
        self.trouble[n] = None;
        self.first.get_or_insert(minute);
        if let Some(last) = &self.last[n] {
            for (key, total) in &totals {
                let before = last.get(key).copied().unwrap_or(0);
                let increase = if *total >= before {
                    total - before
                } else {
                    *total
                };
                *self
                    .per_minute
                    .entry(key.clone())
                    .or_default()
                    .entry(minute)
                    .or_default() += increase;
            }
        }
        for minutes in self.per_minute.values_mut() {
            minutes.retain(|m, _| *m > minute - MINUTES_KEPT as i64);
        }
        self.last[n] = Some(totals);
    }
}

/// Each line's total in `text` (the Prometheus text format).
fn totals(text: &str) -> BTreeMap<LineKey, u64> {
    let mut totals = BTreeMap::new();
    for sample in exposition::samples(text) {
        for figure in FIGURES
            .iter()
            .filter(|f| f.metric == sample.name && sample.label("outcome") == Some(f.outcome))
        {
            let line = match figure.line {
                Line::ByHandler => sample.label("handler").unwrap_or("-").to_owned(),
                Line::Named(name) => name.to_owned(),
            };
            // Counters are whole numbers; a value that is not one is not a count.
            if sample.value.is_finite() && sample.value >= 0.0 {
                *totals.entry((figure.chart, line)).or_default() += sample.value as u64;
            }
        }
    }
    totals
}

#[cfg(test)]
mod tests {
    use super::*;

    /// What `metrics-exporter-prometheus` (the programs' exporter) renders for these counts.
    fn rendered(counts: &[(&'static str, &'static str, &'static str, u64)]) -> String {
        let recorder = metrics_exporter_prometheus::PrometheusBuilder::new().build_recorder();
        let handle = recorder.handle();
        metrics::with_local_recorder(&recorder, || {
            for (metric, handler, outcome, n) in counts {
                metrics::counter!(*metric, "handler" => *handler, "outcome" => *outcome)
                    .increment(*n);
            }
        });
        handle.render()
    }

    fn line(drawn: &Drawn, id: &str, name: &str) -> Vec<f64> {
        let (_, _, lines) = drawn.charts.iter().find(|c| c.1 == id).expect(id);
        let (_, series) = lines.iter().find(|(n, _)| n == name).expect(name);
        series
            .iter()
            .map(|(_, v)| *v)
            .filter(|v| *v > 0.0)
            .collect()
    }

    #[test]
    fn each_minute_draws_the_increase_and_a_restart_counts_from_zero() {
        let scraped = Scraped::new(vec!["http://127.0.0.1:1/metrics".parse().unwrap()]);
        let claims = "guestlist_inbox_claims_total";
        let take = |minute, counts: &[_]| scraped.lock().take(0, totals(&rendered(counts)), minute);
        // What was counted before the console started is not drawn.
        take(100, &[(claims, "pick", "duplicate", 7)]);
        take(
            101,
            &[
                (claims, "pick", "duplicate", 10),
                (claims, "pick", "fresh", 50),
            ],
        );
        take(
            102,
            &[
                (claims, "pick", "duplicate", 12),
                (claims, "bill", "duplicate", 4),
                ("guestlist_consumer_messages_total", "pick", "deferred", 2),
            ],
        );
        // The program restarted: its counters begin again.
        take(103, &[(claims, "pick", "duplicate", 1)]);
        let drawn = scraped.drawn(Span::Hour, 103);
        assert_eq!(line(&drawn, "chart-duplicates", "pick"), [3.0, 2.0, 1.0]);
        assert_eq!(line(&drawn, "chart-duplicates", "bill"), [4.0]);
        assert_eq!(line(&drawn, "chart-deferred", "pick"), [2.0]);
        assert!(drawn.charts.iter().all(|c| c.1 != "chart-replays"));
        assert_eq!((drawn.endpoints, drawn.first), (1, Some(100)));
    }

    #[tokio::test]
    async fn an_endpoint_that_does_not_answer_is_named_on_the_page() {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let url = format!("http://{}/metrics", listener.local_addr().unwrap());
        drop(listener);
        let scraped = Scraped::new(vec![url.parse().unwrap()]);
        scraped.read(5).await;
        let drawn = scraped.drawn(Span::Hour, 5);
        assert!(drawn.charts.is_empty());
        assert_eq!(drawn.trouble.len(), 1, "{:?}", drawn.trouble);
        assert!(drawn.trouble[0].starts_with(&url), "{:?}", drawn.trouble);
    }
}
