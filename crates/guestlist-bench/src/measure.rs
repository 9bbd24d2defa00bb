//! Running a closed loop of workers for a while and counting what they got done.

use std::future::Future;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use tokio::sync::Barrier;

/// What a closed-loop load measured.
pub(crate) struct Load {
    /// Items handled per second.
    pub(crate) per_sec: f64,
    /// How long each call to the step took.
    pub(crate) latencies: Vec<Duration>,
}

/// Runs `workers` copies of `step` back to back until `duration` has passed; each call to
/// `step(worker, iteration)` returns how many messages it handled. Returns messages per second
/// and every call's latency.
pub(crate) async fn load<F, Fut>(
    workers: usize,
    duration: Duration,
    step: F,
) -> anyhow::Result<Load>
where
    F: Fn(usize, u64) -> Fut + Send + Sync + 'static,
    Fut: Future<Output = anyhow::Result<u64>> + Send,
{
    let stop = Arc::new(AtomicBool::new(false));
    let timer = {
        let stop = stop.clone();
        tokio::spawn(async move {
            tokio::time::sleep(duration).await;
            stop.store(true, Ordering::Relaxed);
        })
    };
    let load = load_while(workers, stop, step).await;
    timer.abort();
    load
}

/// Runs `workers` copies of `step` back to back until `stop` is set, keeping every call's
/// latency. The clock starts once every worker is ready.
pub(crate) async fn load_while<F, Fut>(
    workers: usize,
    stop: Arc<AtomicBool>,
    step: F,
) -> anyhow::Result<Load>
where
    F: Fn(usize, u64) -> Fut + Send + Sync + 'static,
    Fut: Future<Output = anyhow::Result<u64>> + Send,
{
    let step = Arc::new(step);
    let start = Arc::new(Barrier::new(workers + 1));
    let tasks: Vec<_> = (0..workers)
        .map(|worker| {
            let (step, start, stop) = (step.clone(), start.clone(), stop.clone());
            tokio::spawn(async move {
                start.wait().await;
                let mut handled = 0;
                let mut latencies = Vec::new();
                for iteration in 0.. {
                    if stop.load(Ordering::Relaxed) {
                        break;
                    }
                    let started = Instant::now();
                    handled += step(worker, iteration).await?;
                    latencies.push(started.elapsed());
                }
                anyhow::Ok((handled, latencies))
            })
        })
        .collect();
    start.wait().await;
    let began = Instant::now();
    let mut handled = 0;
    let mut latencies = Vec::new();
    for task in tasks {
        let (n, mut more) = task.await??;
        handled += n;
        latencies.append(&mut more);
    }
    Ok(Load {
        per_sec: handled as f64 / began.elapsed().as_secs_f64(),
        latencies,
    })
}

/// The `q`-quantile (0.5 for the median) of `latencies`, in milliseconds.
pub(crate) fn percentile_ms(latencies: &mut [Duration], q: f64) -> f64 {
    if latencies.is_empty() {
        return f64::NAN;
    }
    latencies.sort_unstable();
    let at = ((latencies.len() - 1) as f64 * q).round() as usize;
    latencies[at].as_secs_f64() * 1000.0
}

/// The median of the rates sampled for `figure`, of samples `(figure, rate)` taken round by round.
pub(crate) fn median_of<F: PartialEq>(samples: &[(F, f64)], figure: &F) -> f64 {
    median(
        samples
            .iter()
            .filter(|(f, _)| f == figure)
            .map(|(_, rate)| *rate)
            .collect(),
    )
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

/// How long and how often each figure is measured.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Plan {
    pub(crate) rounds: usize,
    pub(crate) each: Duration,
}

impl Plan {
    /// An even number of rounds, so that [`Plan::order`] runs each figure first as often as
    /// last: whichever of two neighbours runs first pays for warming the database (measured on
    /// the inbox bench: about 5%).
    pub(crate) fn new(quick: bool) -> Self {
        if quick {
            Self {
                rounds: 2,
                each: Duration::from_millis(800),
            }
        } else {
            Self {
                rounds: 4,
                each: Duration::from_millis(2500),
            }
        }
    }

    /// The plan of `common`: quick or not, with the rounds it asks for.
    pub(crate) fn of(common: &crate::Common) -> Self {
        let mut plan = Self::new(common.quick);
        if let Some(rounds) = common.rounds {
            plan.rounds = usize::from(rounds).next_multiple_of(2);
        }
        plan
    }

    /// The figures in the order round `round` runs them: as given, reversed every other round.
    pub(crate) fn order<T: Copy>(&self, round: usize, figures: &[T]) -> Vec<T> {
        let mut order = figures.to_vec();
        if !round.is_multiple_of(2) {
            order.reverse();
        }
        order
    }
}
