//! Stopping on SIGTERM.

/// Completes when the process is asked to stop: SIGTERM (what orchestrators send) or Ctrl-C.
/// Pass it to [`Consumer::run`](crate::Consumer::run): the consumer stops fetching, finishes and
/// acknowledges the batch in hand, and returns.
pub async fn shutdown_signal() {
    let ctrl_c = async {
        let _ = tokio::signal::ctrl_c().await;
    };
    #[cfg(unix)]
    let terminate = async {
        match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
            Ok(mut signal) => {
                signal.recv().await;
            }
            Err(_) => std::future::pending::<()>().await,
        }
    };
    #[cfg(not(unix))]
    let terminate = std::future::pending::<()>();
    tokio::select! {
        _ = ctrl_c => {},
        _ = terminate => {},
    }
    tracing::info!("asked to stop; finishing the batch in hand");
}
