//! Stopping on SIGTERM.

use guestlist_core::StopSignal;

/// A run's shutdown signal, polled until it has come and never after.
pub(crate) struct Stop {
    signal: StopSignal,
    came: bool,
}

impl Stop {
    pub(crate) fn new(signal: StopSignal) -> Self {
        Self {
            signal,
            came: false,
        }
    }

    /// Completes once shutdown has come; at once if it has already.
    pub(crate) async fn wait(&mut self) {
        if !self.came {
            self.signal.as_mut().await;
            self.came = true;
        }
    }

    /// Whether shutdown has come, polling the signal once if it had not yet.
    pub(crate) async fn came(&mut self) -> bool {
        if !self.came {
            let signal = &mut self.signal;
            self.came = std::future::poll_fn(|cx| {
                std::task::Poll::Ready(signal.as_mut().poll(cx).is_ready())
            })
            .await;
        }
        self.came
    }
}

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
