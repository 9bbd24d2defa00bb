//! The scale bench's ratios, named for the rows loaded: `single_10m_vs_empty_postgres` and the
//! rest, and the bytes a row costs.

use guestlist::inbox::InboxStats;

use crate::report::Report;

/// N for ratio names: `10m` for 10,000,000, `500k`, or the number itself.
pub(super) fn rows_label(rows: u64) -> String {
    if rows >= 1_000_000 && rows.is_multiple_of(1_000_000) {
        format!("{}m", rows / 1_000_000)
    } else if rows >= 1_000 && rows.is_multiple_of(1_000) {
        format!("{}k", rows / 1_000)
    } else {
        rows.to_string()
    }
}

/// Records a table's bytes per row, in all and split into table and indexes.
pub(super) fn record_bytes(report: &mut Report, backend: &str, label: &str, stats: &InboxStats) {
    let per_row = |bytes: Option<u64>| bytes.map(|b| b as f64 / stats.rows.max(1) as f64);
    let size = &stats.size;
    for (name, value) in [
        ("bytes_per_row", stats.bytes_per_row()),
        ("table_bytes_per_row", per_row(size.table_bytes)),
        ("index_bytes_per_row", per_row(size.index_bytes)),
    ] {
        if let Some(value) = value {
            report
                .ratios
                .insert(format!("{name}_{label}_{backend}"), value.round());
        }
    }
}

/// The ratios, named for N: `single_10m_vs_empty_postgres` and the rest.
pub(super) fn add_ratios(
    report: &mut Report,
    backend: &'static str,
    rows: u64,
    workers: usize,
    loaded: &InboxStats,
) {
    let n = rows_label(rows);
    for figure in ["single", "batch100", "raw_batch100"] {
        let (loaded, empty) = (format!("{figure}_loaded"), format!("{figure}_empty"));
        let ratio = report.quotient(&loaded, &empty, backend, workers);
        report.record(&format!("{figure}_{n}_vs_empty_{backend}"), ratio);
    }
    // How much more guestlist's batches slow down on the loaded table than the same batch in
    // raw SQL does: each round's loaded/empty over raw SQL's, the median of the rounds.
    let rounds = |name: &str| report.rounds.get(&(name.to_owned(), backend.to_owned()));
    if let [Some(bl), Some(be), Some(rl), Some(re)] = [
        rounds("batch100_loaded"),
        rounds("batch100_empty"),
        rounds("raw_batch100_loaded"),
        rounds("raw_batch100_empty"),
    ] {
        let per_round = (0..bl.len().min(be.len()).min(rl.len()).min(re.len()))
            .map(|i| (bl[i] / be[i]) / (rl[i] / re[i]))
            .collect();
        report.record(
            &format!("batch100_{n}_vs_raw_sql_ratio_{backend}"),
            Some(crate::measure::median(per_round)),
        );
    }
    // The median of the purge rounds' ratios of p99s.
    let p99s = report.quotient("claims_idle_p99", "claims_during_purge_p99", backend, 1);
    report.record(&format!("idle_p99_vs_purge_p99_{n}_{backend}"), p99s);
    let purge = report.get("purge", backend, 1);
    report
        .ratios
        .insert(format!("purge_rows_per_sec_{n}_{backend}"), purge.round());
    record_bytes(report, backend, &n, loaded);
}
