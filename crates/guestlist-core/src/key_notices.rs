//! Notices that a key in flight was answered or released by another process, as a store's
//! listener hears them (PostgreSQL's `NOTIFY`, Redis's `PUBLISH`), for the requests of this
//! process that wait on the key.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering::SeqCst};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError, Weak};

use tokio::sync::Notify;

/// Watched keys past which the forgotten ones are swept out.
const SWEEP_PAST: usize = 1_024;

/// The keys this process's requests wait on, by the name the store's notices give them.
#[derive(Debug, Default)]
pub struct KeyNotices {
    watched: Mutex<HashMap<String, Weak<KeyNotice>>>,
}

/// The notice of one key, shared by the requests of this process that wait on it; it marks the
/// key in the store once for all of them, until the next notice.
#[derive(Debug, Default)]
pub struct KeyNotice {
    heard: Notify,
    /// Whether a request of this process marked the key since its last notice: the others
    /// wait without marking it again (a statement each, every time they look).
    marked: AtomicBool,
}

/// Clears a key's mark when dropped: its mark did not take.
struct Unmark<'a>(&'a AtomicBool);

impl Drop for Unmark<'_> {
    fn drop(&mut self) {
        self.0.store(false, SeqCst);
    }
}

impl KeyNotice {
    /// Resolves once the key's notice is heard. The first waiter since the last notice marks
    /// the key with `mark` (`true` where the key was in flight and is now marked); `mark` is not
    /// run where another did. Never resolves where the mark did not take (the key was no longer
    /// in flight: the waiter's poll looks again); the store's error where it failed.
    pub async fn heard<E>(&self, mark: impl Future<Output = Result<bool, E>>) -> Result<(), E> {
        let heard = self.heard.notified();
        tokio::pin!(heard);
        // Listening before the mark: a notice between the two is not missed.
        heard.as_mut().enable();
        if !self.marked.swap(true, SeqCst) {
            // Unmarked again unless the mark took, also where this wait is dropped mid-mark.
            let unmark = Unmark(&self.marked);
            match mark.await {
                Ok(true) => std::mem::forget(unmark),
                Ok(false) => {
                    drop(unmark);
                    return std::future::pending().await;
                }
                Err(err) => return Err(err),
            }
        }
        heard.await;
        Ok(())
    }
}

impl KeyNotices {
    fn watched(&self) -> MutexGuard<'_, HashMap<String, Weak<KeyNotice>>> {
        // A plain map, whole after any panic between its statements.
        self.watched.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// The notice of the key called `name`, shared by every request that waits on it. Register
    /// it (and enable its `notified()`) before the store learns that the key is waited on, so
    /// that no notice is missed.
    pub fn watch(&self, name: String) -> Arc<KeyNotice> {
        let mut watched = self.watched();
        if watched.len() > SWEEP_PAST {
            watched.retain(|_, notice| notice.strong_count() > 0);
        }
        if let Some(notice) = watched.get(&name).and_then(Weak::upgrade) {
            return notice;
        }
        let notice = Arc::new(KeyNotice::default());
        watched.insert(name, Arc::downgrade(&notice));
        notice
    }

    /// Wakes the requests waiting on the key called `name`, if any.
    pub fn tell(&self, name: &str) {
        let notice = self.watched().get(name).and_then(Weak::upgrade);
        if let Some(notice) = notice {
            // The store's mark went with the answer or the release: the next waits mark again.
            notice.marked.store(false, SeqCst);
            notice.heard.notify_waiters();
        }
    }
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::AtomicUsize;
    use std::time::Duration;

    use tokio::time::timeout;

    use super::*;

    const WAIT: Duration = Duration::from_millis(50);

    #[tokio::test]
    async fn a_notice_wakes_its_keys_waiters_only() {
        let notices = KeyNotices::default();
        let (a, b) = (notices.watch("a".into()), notices.watch("b".into()));
        let marked = || async { Ok::<_, ()>(true) };
        let (heard_a, heard_b) = (a.heard(marked()), b.heard(marked()));
        tokio::pin!(heard_a, heard_b);
        // Both marked, and listening, before the notice.
        assert!(timeout(WAIT, heard_a.as_mut()).await.is_err());
        assert!(timeout(WAIT, heard_b.as_mut()).await.is_err());
        notices.tell("a");
        assert!(timeout(WAIT, heard_a).await.is_ok(), "a heard");
        assert!(timeout(WAIT, heard_b).await.is_err(), "b waits on");
        assert!(
            Arc::ptr_eq(&a, &notices.watch("a".into())),
            "one notice per key"
        );
    }

    #[tokio::test]
    async fn waiters_mark_a_key_once_until_its_next_notice() {
        let notices = KeyNotices::default();
        let notice = notices.watch("k".into());
        let marks = AtomicUsize::new(0);
        let mark = |took: bool| {
            let marks = &marks;
            async move {
                marks.fetch_add(1, SeqCst);
                Ok::<_, ()>(took)
            }
        };
        let (first, second) = (notice.heard(mark(true)), notice.heard(mark(true)));
        tokio::pin!(first, second);
        assert!(timeout(WAIT, first.as_mut()).await.is_err());
        assert!(timeout(WAIT, second.as_mut()).await.is_err());
        assert_eq!(
            marks.load(SeqCst),
            1,
            "the second waiter does not mark again"
        );
        notices.tell("k");
        assert!(timeout(WAIT, first).await.is_ok(), "the first heard");
        assert!(timeout(WAIT, second).await.is_ok(), "the second heard");
        // After a notice, the next waiter marks again; where its mark does not take (the key
        // no longer in flight), it waits for nothing and the one after marks again.
        assert!(timeout(WAIT, notice.heard(mark(false))).await.is_err());
        assert_eq!(marks.load(SeqCst), 2);
        assert!(timeout(WAIT, notice.heard(mark(true))).await.is_err());
        assert_eq!(marks.load(SeqCst), 3);
        // A store that fails to mark says so, and leaves the mark to the next waiter.
        notices.tell("k");
        let failed = notice.heard(async { Err::<bool, _>("gone") }).await;
        assert_eq!(failed, Err("gone"));
        assert!(timeout(WAIT, notice.heard(mark(true))).await.is_err());
        assert_eq!(marks.load(SeqCst), 4);
        // A wait dropped before its mark ended (its client gone) leaves the mark to the next.
        notices.tell("k");
        let stuck = notice.heard(std::future::pending::<Result<bool, ()>>());
        assert!(timeout(WAIT, stuck).await.is_err());
        assert!(timeout(WAIT, notice.heard(mark(true))).await.is_err());
        assert_eq!(marks.load(SeqCst), 5);
    }
}
