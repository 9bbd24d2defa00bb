//! The attempts running behind a layer, so that a server can wait for them before it exits.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use tokio::sync::Notify;

/// The attempts that hold a key and are running now, across every service of one layer.
///
/// A keyed request, once its body has arrived, is claimed and attempted on a task of its own, to
/// its end, even when its client hangs up (so that the retry finds the stored response). A server that stops accepting connections therefore has no
/// request left to wait for while attempts may still be running: wait for
/// [`settled`](Self::settled) before the runtime goes, or the attempt is cut off between the
/// handler's work and its stored response, and the key stays locked until its lease ends.
///
/// ```no_run
/// # #[cfg(feature = "sqlite")]
/// # async fn run(pool: sqlx::SqlitePool) {
/// use guestlist_http::IdempotencyLayer;
///
/// let layer = IdempotencyLayer::new(guestlist_sqlx::SqlKeyStore::new(pool));
/// let attempts = layer.attempts();
/// // Serve the app with `.layer(layer)` and a graceful shutdown; then, before returning:
/// attempts.settled().await;
/// # }
/// ```
#[derive(Debug, Clone, Default)]
pub struct Attempts {
    inner: Arc<Inner>,
}

#[derive(Debug, Default)]
struct Inner {
    running: AtomicUsize,
    idle: Notify,
}

/// One running attempt; counted until dropped.
pub(crate) struct Running(Arc<Inner>);

impl Drop for Running {
    fn drop(&mut self) {
        if self.0.running.fetch_sub(1, Ordering::SeqCst) == 1 {
            self.0.idle.notify_waiters();
        }
    }
}

impl Attempts {
    /// Counts an attempt until the returned guard is dropped.
    pub(crate) fn enter(&self) -> Running {
        self.inner.running.fetch_add(1, Ordering::SeqCst);
        Running(Arc::clone(&self.inner))
    }

    /// How many attempts are running now.
    pub fn running(&self) -> usize {
        self.inner.running.load(Ordering::SeqCst)
    }

    /// Completes once no attempt is running.
    pub async fn settled(&self) {
        loop {
            let idle = self.inner.idle.notified();
            if self.running() == 0 {
                return;
            }
            idle.await;
        }
    }
}
