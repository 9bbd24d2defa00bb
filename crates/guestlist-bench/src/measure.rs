//! Running a closed loop of workers for a while and counting what they got done.

use std::future::Future;
use std::sync::Arc;
use std::time::{Duration, Instant};

use tokio::sync::Barrier;

/// Runs `workers` copies of `step` back to back until `duration` has passed; each call to
/// `step(worker, iteration)` returns how many messages it handled. Returns messages per second.
pub(crate) async fn throughput<F, Fut>(
    workers: usize,
    duration: Duration,
    step: F,
) -> anyhow::Result<f64>
where
    F: Fn(usize, u64) -> Fut + Send + Sync + 'static,
    Fut: Future<Output = anyhow::Result<u64>> + Send,
{
    let step = Arc::new(step);
    let start = Arc::new(Barrier::new(workers + 1));
    let tasks: Vec<_> = (0..workers)
        .map(|worker| {
            let (step, start) = (step.clone(), start.clone());
            tokio::spawn(async move {
                start.wait().await;
                let deadline = Instant::now() + duration;
                let mut handled = 0;
                let mut iteration = 0;
                while Instant::now() < deadline {
                    handled += step(worker, iteration).await?;
                    iteration += 1;
                }
                anyhow::Ok(handled)
            })
        })
        .collect();
    start.wait().await;
    let began = Instant::now();
    let mut handled = 0;
    for task in tasks {
        handled += task.await??;
    }
    Ok(handled as f64 / began.elapsed().as_secs_f64())
}

/// The median of `values` (which must not be empty): the mean of the middle two for an even count.
pub(crate) fn median(mut values: Vec<f64>) -> f64 {
    values.sort_by(f64::total_cmp);
    let mid = values.len() / 2;
    if values.len().is_multiple_of(2) {
        (values[mid - 1] + values[mid]) / 2.0
    } else {
        values[mid]
    }
}
