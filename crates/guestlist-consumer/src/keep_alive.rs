//! Deliveries kept alive while they are worked on, or held through an outage, where the broker
//! would otherwise redeliver them: a task that stops when its guard is dropped.

use std::sync::Arc;
use std::time::Duration;

use crate::Delivery;

/// Sends each held delivery's keep-alive every third of the ack wait until dropped.
pub(crate) struct KeepAlive(Option<tokio::task::JoinHandle<()>>);

impl KeepAlive {
    /// Keeps `held` alive every third of `ack_wait` (at least every 100 ms); does nothing
    /// without an ack wait or deliveries.
    pub(crate) fn start<D: Delivery>(ack_wait: Option<Duration>, held: &[Arc<D>]) -> Self {
        let Some(ack_wait) = ack_wait.filter(|_| !held.is_empty()) else {
            return Self(None);
        };
        let deliveries: Vec<Arc<D>> = held.to_vec();
        let every = (ack_wait / 3).max(Duration::from_millis(100));
        Self(Some(tokio::spawn(async move {
            let mut ticks = tokio::time::interval_at(tokio::time::Instant::now() + every, every);
            loop {
                ticks.tick().await;
                for delivery in &deliveries {
                    let _ = delivery.keep_alive().await;
                }
            }
        })))
    }
}

impl Drop for KeepAlive {
    fn drop(&mut self) {
        if let Some(task) = self.0.take() {
            task.abort();
        }
    }
}
