//! The purge at production size: live claims alone, then while a purge deletes the oldest day
//! left, three times over, and the purge's own rate.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use anyhow::Context;
use guestlist::{Retention, retention::Purged};

use super::{Claims, DAY, Figure, LOADED_TABLE, Scale, WORKERS};
use crate::inbox::preload::Preload;
use crate::measure::{Load, Plan, load_while, median};
use crate::report::{Latency, Report, Row};

/// How many times the purge is measured, each on the oldest day left.
const PURGE_ROUNDS: usize = 3;

/// Three times: live claims alone, then during a purge of the oldest day left; the purge's
/// rate. Returns the rows the purges deleted.
pub(super) async fn purge<DB: Preload>(
    bench: &Arc<Claims<DB>>,
    plan: Plan,
    scale: Scale,
    report: &mut Report,
) -> anyhow::Result<u64> {
    let batch = scale
        .purge_batch
        .unwrap_or(guestlist::retention::Purge::<DB>::DEFAULT_BATCH_SIZE);
    let (mut idle_all, mut during_all) = (Vec::new(), Vec::new());
    let (mut idle_p99, mut during_p99, mut rates) = (Vec::new(), Vec::new(), Vec::new());
    let (mut idle_rates, mut during_rates) = (Vec::new(), Vec::new());
    let mut deleted_all = 0;
    for round in 0..PURGE_ROUNDS {
        DB::exec(&bench.pool, DB::SETTLE.to_owned()).await?;
        let mut idle = bench.run(Figure::SingleLoaded, plan.each * 4).await?;
        let idle_latency = Latency::of(&mut idle.latencies);
        eprintln!(
            "  claims_idle          round {round}  {:>9.0} ids/s  p99 {:.2} ms",
            idle.per_sec, idle_latency.p99_ms
        );
        let (deleted, rate, mut during) = purge_oldest_day(bench, batch, scale.purge_pause).await?;
        let during_latency = Latency::of(&mut during.latencies);
        eprintln!(
            "  purge                round {round}  deleted {deleted} rows ({rate:.0} rows/s, batches of {batch}, pauses of {:?})",
            scale.purge_pause
        );
        eprintln!(
            "  claims_during_purge  round {round}  {:>9.0} ids/s  p99 {:.2} ms",
            during.per_sec, during_latency.p99_ms
        );
        deleted_all += deleted;
        idle_p99.push(idle_latency.p99_ms);
        during_p99.push(during_latency.p99_ms);
        rates.push(rate);
        idle_rates.push(idle.per_sec);
        during_rates.push(during.per_sec);
        idle_all.append(&mut idle.latencies);
        during_all.append(&mut during.latencies);
    }
    let label = DB::LABEL;
    for (name, latencies, per_sec) in [
        ("claims_idle", &mut idle_all, idle_rates),
        ("claims_during_purge", &mut during_all, during_rates),
    ] {
        report.rows.push(Row {
            name: name.to_owned(),
            backend: label,
            workers: WORKERS,
            batch: 1,
            per_sec: median(per_sec),
            unit: "msgs/s",
            latency: Some(Latency::of(latencies)),
        });
    }
    // Each round's p99 on its own, so that their ratio is the median of the rounds' ratios.
    for (name, values) in [
        ("claims_idle_p99", idle_p99),
        ("claims_during_purge_p99", during_p99),
    ] {
        report
            .rounds
            .insert((name.to_owned(), label.to_owned()), values);
    }
    report.rows.push(Row {
        name: "purge".to_owned(),
        backend: label,
        workers: 1,
        batch: batch as usize,
        per_sec: median(rates),
        unit: "rows/s",
        latency: None,
    });
    Ok(deleted_all)
}

/// Purges the oldest day left while four workers claim: the rows deleted, their rate, and the
/// claims made meanwhile.
async fn purge_oldest_day<DB: Preload>(
    bench: &Arc<Claims<DB>>,
    batch: u32,
    pause: Duration,
) -> anyhow::Result<(u64, f64, Load)> {
    // Everything older than the oldest row's age less a day.
    let oldest = bench
        .loaded
        .stats(&bench.pool)
        .await?
        .oldest
        .context("the loaded table is empty")?;
    let keep = oldest.saturating_sub(DAY).max(Duration::from_secs(1));
    let retention = Retention::new(keep, Duration::ZERO)?;
    let done = Arc::new(AtomicBool::new(false));
    let purging = {
        let (bench, done) = (bench.clone(), done.clone());
        tokio::spawn(async move {
            let started = Instant::now();
            let purged = bench
                .loaded
                .purge(retention)
                .batch_size(batch)
                .pause(pause)
                .run(&bench.pool)
                .await;
            done.store(true, Ordering::Relaxed);
            purged.map(|p| (p, started.elapsed()))
        })
    };
    let claims = bench.clone();
    let during = load_while(WORKERS, done, move |_worker, n| {
        let claims = claims.clone();
        async move { claims.step(&claims.loaded, 1, false, n).await }
    })
    .await?;
    let (purged, took) = purging.await??;
    let Purged::Deleted(deleted) = purged else {
        anyhow::bail!("another purger held {LOADED_TABLE}");
    };
    Ok((deleted, deleted as f64 / took.as_secs_f64(), during))
}
