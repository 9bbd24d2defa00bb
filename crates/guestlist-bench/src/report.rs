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
    /// Messages per transaction.
    pub(crate) batch: usize,
    pub(crate) msgs_per_sec: f64,
}

/// Every figure of a run, and the ratios between them.
#[derive(Debug, Default)]
pub(crate) struct Report {
    pub(crate) rows: Vec<Row>,
    pub(crate) ratios: BTreeMap<String, f64>,
}

impl Report {
    /// The figure named `name` for `backend` at `workers`.
    pub(crate) fn get(&self, name: &str, backend: &str, workers: usize) -> f64 {
        self.rows
            .iter()
            .find(|r| r.name == name && r.backend == backend && r.workers == workers)
            .map_or(f64::NAN, |r| r.msgs_per_sec)
    }

    pub(crate) fn print(&self) {
        println!(
            "\n{:<22} {:<9} {:>7} {:>6} {:>12}",
            "figure", "backend", "workers", "batch", "msgs/s"
        );
        for r in &self.rows {
            println!(
                "{:<22} {:<9} {:>7} {:>6} {:>12.0}",
                r.name, r.backend, r.workers, r.batch, r.msgs_per_sec
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
                json!({
                    "name": r.name,
                    "backend": r.backend,
                    "workers": r.workers,
                    "batch": r.batch,
                    "msgs_per_sec": r.msgs_per_sec.round(),
                })
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
