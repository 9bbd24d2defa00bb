//! Waiting for the operator to stop the program.

/// SIGTERM and Ctrl-C (SIGINT), caught from the moment of [`Terminated::install`]: a signal
/// that arrives before anyone waits is kept, not acted on by the default handler.
pub(crate) struct Terminated {
    #[cfg(unix)]
    term: tokio::signal::unix::Signal,
}

impl Terminated {
    /// Starts catching the signals.
    pub(crate) fn install() -> anyhow::Result<Self> {
        Ok(Self {
            #[cfg(unix)]
            term: tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())
                .map_err(|err| anyhow::anyhow!("cannot catch SIGTERM: {err}"))?,
        })
    }

    /// Completes on SIGTERM or Ctrl-C.
    pub(crate) async fn wait(mut self) {
        #[cfg(unix)]
        tokio::select! {
            _ = self.term.recv() => {}
            _ = tokio::signal::ctrl_c() => {}
        }
        #[cfg(not(unix))]
        {
            let _ = tokio::signal::ctrl_c().await;
        }
    }
}
