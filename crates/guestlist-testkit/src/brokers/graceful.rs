//! A run told to stop while what it waits on never answers: it must end within its shutdown
//! grace, and not before it.

use std::time::{Duration, Instant};

use tokio::sync::oneshot;
use tokio::task::JoinHandle;

/// Tells the run of `task` to stop through `stop` and waits for it: it must end within `grace`
/// and a few seconds (else the story fails, naming `what` and `label`), and not before `grace`,
/// since nothing it waits on answers. The run's outcome.
pub async fn stopped_within_grace<T>(
    label: &str,
    what: &str,
    stop: oneshot::Sender<()>,
    task: JoinHandle<T>,
    grace: Duration,
) -> T {
    let asked = Instant::now();
    stop.send(()).expect("the run is there to be told");
    let outcome = tokio::time::timeout(grace + Duration::from_secs(5), task)
        .await
        .unwrap_or_else(|_| {
            panic!(
                "{label}: {what}, told to stop while its database stalls, was still running \
                 {:?} later (its shutdown grace is {grace:?})",
                asked.elapsed()
            )
        })
        .expect("the run's task");
    assert!(
        asked.elapsed() >= grace,
        "{label}: {what} stopped after {:?}, before its grace, though nothing it waited on \
         answered",
        asked.elapsed()
    );
    outcome
}
