//! Figures, ratios, and how they are shown.

use std::collections::BTreeMap;
use std::path::Path;

use serde_json::json;

/// One measured figure.
#[derive(Debug, Clone)]
pub(crate) struct Row {
    /// What was measured: `work_alone`, `inbox`, `batch100`…
    pub(crate) name: String,
    /// `postgres`, `sqlite` or `mysql`.
    pub(crate) backend: &'static str,
    pub(crate) workers: usize,
    /// Messages per transaction (1 for HTTP requests).
    pub(crate) batch: usize,
    /// Throughput, in `unit`.
    pub(crate) per_sec: f64,
    /// `msgs/s` or `req/s`.
    pub(crate) unit: &'static str,
    /// Latency percentiles in milliseconds, where measured.
    pub(crate) latency: Option<Latency>,
}

/// Latency percentiles of a figure, in milliseconds.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Latency {
    pub(crate) p50_ms: f64,
    pub(crate) p99_ms: f64,
}

impl Latency {
    /// The median and the 99th percentile of `latencies` (sorted in place).
    pub(crate) fn of(latencies: &mut [std::time::Duration]) -> Self {
        Self {
            p50_ms: crate::measure::percentile_ms(latencies, 0.5),
            p99_ms: crate::measure::percentile_ms(latencies, 0.99),
        }
    }
}

/// Every figure of a run, and the ratios between them.
#[derive(Debug, Default)]
pub(crate) struct Report {
    pub(crate) rows: Vec<Row>,
    pub(crate) ratios: BTreeMap<String, f64>,
    /// Each round's rate of the figures measured round by round (name, backend), in the order
    /// the rounds ran: a ratio of two of them is the median of their ratios round by round.
    pub(crate) rounds: BTreeMap<(String, String), Vec<f64>>,
}

impl Report {
    /// The figure named `name` for `backend` at `workers`.
    pub(crate) fn get(&self, name: &str, backend: &str, workers: usize) -> f64 {
        self.rows
            .iter()
            .find(|r| r.name == name && r.backend == backend && r.workers == workers)
            .map_or(f64::NAN, |r| r.per_sec)
    }

    /// Adds the row of a figure timed key by key, one at a time: `per_sec` keys a second, and
    /// each key's time as `latency`.
    pub(crate) fn key_by_key(
        &mut self,
        name: &str,
        backend: &'static str,
        per_sec: f64,
        latency: Latency,
    ) {
        self.rows.push(Row {
            name: name.to_owned(),
            backend,
            workers: 1,
            batch: 1,
            per_sec,
            unit: "keys/s",
            latency: Some(latency),
        });
    }

    /// Records `over / under` for `backend` at `workers` as the ratio `<name>_<backend>`, where
    /// both figures were measured.
    pub(crate) fn ratio(
        &mut self,
        name: &str,
        over: &str,
        under: &str,
        backend: &str,
        workers: usize,
    ) {
        let quotient = self.quotient(over, under, backend, workers);
        self.record(&format!("{name}_{backend}"), quotient);
    }

    /// `over / under` for `backend` with `at` workers; `None` unless both figures were measured.
    ///
    /// Where both were measured round by round, it is the median of the two figures' ratios
    /// round by round: on a machine whose speed drifts (a shared host), each round's pair ran
    /// close together, where the medians of the two figures may come from different moments.
    pub(crate) fn quotient(
        &self,
        over: &str,
        under: &str,
        backend: &str,
        at: usize,
    ) -> Option<f64> {
        let rounds = |name: &str| self.rounds.get(&(name.to_owned(), backend.to_owned()));
        if let (Some(overs), Some(unders)) = (rounds(over), rounds(under))
            && overs.len() == unders.len()
            && !overs.is_empty()
        {
            let paired = overs.iter().zip(unders).map(|(o, u)| o / u).collect();
            return Some(crate::measure::median(paired));
        }
        let (over, under) = (self.get(over, backend, at), self.get(under, backend, at));
        (!over.is_nan() && !under.is_nan()).then(|| over / under)
    }

    /// Records `ratio` under `name`, as it is, if there is one.
    pub(crate) fn record(&mut self, name: &str, ratio: Option<f64>) {
        if let Some(ratio) = ratio {
            self.ratios.insert(name.to_owned(), ratio);
        }
    }

    pub(crate) fn print(&self) {
        println!(
            "\n{:<22} {:<18} {:>7} {:>6} {:>12} {:>6} {:>9} {:>9}",
            "figure", "backend", "workers", "batch", "throughput", "unit", "p50 ms", "p99 ms"
        );
        for r in &self.rows {
            let (p50, p99) = r.latency.map_or((String::new(), String::new()), |l| {
                (format!("{:.2}", l.p50_ms), format!("{:.2}", l.p99_ms))
            });
            println!(
                "{:<22} {:<18} {:>7} {:>6} {:>12.0} {:>6} {p50:>9} {p99:>9}",
                r.name, r.backend, r.workers, r.batch, r.per_sec, r.unit
            );
        }
        println!("\n{:<44} {:>10}", "ratio", "value");
        for (name, value) in &self.ratios {
            println!("{name:<44} {value:>10.3}");
        }
    }

    pub(crate) fn write_json(&self, path: &Path) -> anyhow::Result<()> {
        let rows: Vec<_> = self
            .rows
            .iter()
            .map(|r| {
                let mut row = json!({
                    "name": r.name,
                    "backend": r.backend,
                    "workers": r.workers,
                    "batch": r.batch,
                    // CPU per item to a tenth of a µs; rates to the unit.
                    "per_sec": if r.unit.starts_with("CPU") {
                        (r.per_sec * 10.0).round() / 10.0
                    } else {
                        r.per_sec.round()
                    },
                    "unit": r.unit,
                });
                if let Some(latency) = r.latency {
                    row["p50_ms"] = json!((latency.p50_ms * 100.0).round() / 100.0);
                    row["p99_ms"] = json!((latency.p99_ms * 100.0).round() / 100.0);
                }
                row
            })
            .collect();
        let ratios: serde_json::Map<_, _> = self
            .ratios
            .iter()
            .map(|(k, v)| (k.clone(), json!((v * 1000.0).round() / 1000.0)))
            .collect();
        let text = serde_json::to_string_pretty(&json!({ "rows": rows, "ratios": ratios }))?;
        std::fs::write(path, text)?;
        Ok(())
    }
}
