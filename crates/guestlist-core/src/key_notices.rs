//! Notices that a key in flight was answered or released by another process, as a store's
//! listener hears them (PostgreSQL's `NOTIFY`, Redis's `PUBLISH`), for the requests of this
//! process that wait on the key.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError, Weak};

use tokio::sync::Notify;

/// Watched keys past which the forgotten ones are swept out.
const SWEEP_PAST: usize = 1_024;

/// The keys this process's requests wait on, by the name the store's notices give them.
#[derive(Debug, Default)]
pub struct KeyNotices {
    watched: Mutex<HashMap<String, Weak<Notify>>>,
}

impl KeyNotices {
    fn watched(&self) -> MutexGuard<'_, HashMap<String, Weak<Notify>>> {
        // A plain map, whole after any panic between its statements.
        self.watched.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// The notice of the key called `name`, shared by every request that waits on it. Register
    /// it (and enable its `notified()`) before the store learns that the key is waited on, so
    /// that no notice is missed.
    pub fn watch(&self, name: String) -> Arc<Notify> {
        let mut watched = self.watched();
        if watched.len() > SWEEP_PAST {
            watched.retain(|_, notice| notice.strong_count() > 0);
        }
        if let Some(notice) = watched.get(&name).and_then(Weak::upgrade) {
            return notice;
        }
        let notice = Arc::new(Notify::new());
        watched.insert(name, Arc::downgrade(&notice));
        notice
    }

    /// Wakes the requests waiting on the key called `name`, if any.
    pub fn tell(&self, name: &str) {
        let notice = self.watched().get(name).and_then(Weak::upgrade);
        if let Some(notice) = notice {
            notice.notify_waiters();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_notice_wakes_its_keys_waiters_only() {
        let notices = KeyNotices::default();
        let (a, b) = (notices.watch("a".into()), notices.watch("b".into()));
        let (woken_a, woken_b) = (a.notified(), b.notified());
        tokio::pin!(woken_a, woken_b);
        woken_a.as_mut().enable();
        woken_b.as_mut().enable();
        notices.tell("a");
        let wait = std::time::Duration::from_millis(50);
        assert!(tokio::time::timeout(wait, woken_a).await.is_ok(), "a woken");
        assert!(
            tokio::time::timeout(wait, woken_b).await.is_err(),
            "b sleeps on"
        );
        assert!(
            Arc::ptr_eq(&a, &notices.watch("a".into())),
            "one notice per key"
        );
    }
}
