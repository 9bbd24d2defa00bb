//! Stopping within a bound: a run asked to stop finishes what it has in hand, but only for so
//! long, so that a database or broker that stopped answering cannot keep a process from exiting.

use std::future::Future;
use std::pin::Pin;
use std::time::Duration;

/// The signal a run under [`within_grace`] watches: it completes once the run is asked to stop.
pub type StopSignal = Pin<Box<dyn Future<Output = ()> + Send>>;

/// Runs `work` until it ends by itself or, once `shutdown` has come, for at most `grace` more:
/// `None` when the grace ran out and the work was dropped where it stood.
///
/// `work` is handed a [`StopSignal`] that completes when `shutdown` does; a run watches it to
/// stop taking new work and finish what it has in hand. What it has in hand may be waiting on a
/// database or broker that holds the connection open but never answers (a stalled link, a
/// paused server): no timeout of its own ends that wait soon, and an orchestrator that sent
/// SIGTERM would SIGKILL the process at its own deadline anyway. Dropping the work at the grace
/// is that crash, on the process's own terms: what it had not settled goes back to its owner
/// (a lease expires, a broker redelivers) and the inbox absorbs the repeats.
///
/// ```
/// use std::time::Duration;
/// use guestlist_core::within_grace;
///
/// # tokio_test_block_on(async {
/// // Work that stops when told.
/// let stopped = within_grace(async {}, Duration::from_secs(1), |stop| async move {
///     stop.await;
///     "finished"
/// })
/// .await;
/// assert_eq!(stopped, Some("finished"));
///
/// // Work stuck on a call that never answers.
/// let stuck = within_grace(async {}, Duration::from_millis(10), |_stop| async {
///     std::future::pending::<()>().await;
/// })
/// .await;
/// assert_eq!(stuck, None);
/// # });
/// # fn tokio_test_block_on(f: impl std::future::Future<Output = ()>) {
/// #     tokio::runtime::Builder::new_current_thread().enable_time().build().unwrap().block_on(f)
/// # }
/// ```
pub async fn within_grace<T, F>(
    shutdown: impl Future<Output = ()>,
    grace: Duration,
    work: impl FnOnce(StopSignal) -> F,
) -> Option<T>
where
    F: Future<Output = T>,
{
    let (tell, mut told) = tokio::sync::watch::channel(false);
    let signal: StopSignal = Box::pin(async move {
        // An error means the sender is gone, which only happens once this function returned.
        let _ = told.wait_for(|stop| *stop).await;
    });
    let work = work(signal);
    tokio::pin!(work, shutdown);
    tokio::select! {
        done = &mut work => return Some(done),
        () = &mut shutdown => {}
    }
    let _ = tell.send(true);
    tokio::time::timeout(grace, work).await.ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test(start_paused = true)]
    async fn work_that_ends_by_itself_is_not_cut() {
        let done = within_grace(
            std::future::pending(),
            Duration::from_millis(1),
            |_| async {
                tokio::time::sleep(Duration::from_secs(60)).await;
                7
            },
        )
        .await;
        assert_eq!(done, Some(7));
    }

    #[tokio::test(start_paused = true)]
    async fn work_told_to_stop_gets_its_grace_and_no_more() {
        let started = tokio::time::Instant::now();
        let finished = within_grace(async {}, Duration::from_secs(5), |stop| async move {
            stop.await;
            tokio::time::sleep(Duration::from_secs(4)).await;
        })
        .await;
        assert_eq!(finished, Some(()));
        let stuck = within_grace(async {}, Duration::from_secs(5), |stop| async move {
            stop.await;
            tokio::time::sleep(Duration::from_secs(6)).await;
        })
        .await;
        assert_eq!(stuck, None);
        assert_eq!(started.elapsed(), Duration::from_secs(9));
    }

    #[tokio::test(start_paused = true)]
    async fn the_signal_comes_only_with_shutdown() {
        let shutdown = tokio::time::sleep(Duration::from_secs(3));
        let started = tokio::time::Instant::now();
        let told_at = within_grace(shutdown, Duration::from_secs(1), |stop| async move {
            stop.await;
            started.elapsed()
        })
        .await;
        assert_eq!(told_at, Some(Duration::from_secs(3)));
    }
}
