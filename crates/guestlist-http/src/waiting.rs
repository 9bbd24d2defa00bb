//! Requests waiting for the answer of the attempt that holds their key: counted against the
//! caps, and woken the moment an attempt of this process ends (other processes' attempts are
//! noticed by a bounded poll of the store).

use std::collections::HashMap;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

use guestlist_core::{IdempotencyKey, Scope};
use tokio::sync::Notify;

/// The requests waiting on keys in flight, and their caps.
#[derive(Debug)]
pub(crate) struct WaitRoom {
    keys: Mutex<Keys>,
    /// How many requests wait, on all keys (kept with `Keys::waiting`, under its lock): read
    /// without the lock by an ending attempt, which has no one to wake while it is 0.
    any: std::sync::atomic::AtomicUsize,
    per_key: usize,
    in_all: usize,
}

#[derive(Debug, Default)]
struct Keys {
    by_key: HashMap<KeyId, Arc<KeyWait>>,
    waiting: usize,
}

/// A key as the room knows it: its name within its scope ([`Scope::qualify`]).
type KeyId = String;

#[derive(Debug, Default)]
struct KeyWait {
    woken: Notify,
    /// Requests waiting on it (under the room's lock).
    waiting: std::sync::atomic::AtomicUsize,
}

/// One request waiting on a key: it leaves the room when dropped (answered, gone past its
/// bound, or its client hung up).
pub(crate) struct Waiter {
    room: Arc<WaitRoom>,
    id: KeyId,
    key: Arc<KeyWait>,
}

/// Wakes a key's waiters when dropped: held by the attempt that holds the key, so that however
/// the attempt ends (stored, released, kept locked, or its task gone) they look again.
pub(crate) struct Wake {
    room: Arc<WaitRoom>,
    id: KeyId,
}

fn id_of(scope: &Scope, key: &IdempotencyKey) -> KeyId {
    scope.qualify(key)
}

impl WaitRoom {
    /// A room for at most `per_key` requests waiting on one key and `in_all` on all keys.
    pub(crate) fn new(per_key: usize, in_all: usize) -> Self {
        Self {
            keys: Mutex::default(),
            any: std::sync::atomic::AtomicUsize::new(0),
            per_key,
            in_all,
        }
    }

    fn lock(&self) -> MutexGuard<'_, Keys> {
        // Plain counts, whole after any panic between their statements.
        self.keys.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Lets a request wait on `key` of `scope`; `None` where a cap is reached.
    pub(crate) fn enter(self: &Arc<Self>, scope: &Scope, key: &IdempotencyKey) -> Option<Waiter> {
        use std::sync::atomic::Ordering::Relaxed;
        let id = id_of(scope, key);
        let mut keys = self.lock();
        if keys.waiting >= self.in_all {
            return None;
        }
        let wait = Arc::clone(keys.by_key.entry(id.clone()).or_default());
        if wait.waiting.load(Relaxed) >= self.per_key {
            return None;
        }
        wait.waiting.fetch_add(1, Relaxed);
        keys.waiting += 1;
        // Before the waiter looks at the store again: an attempt that ends after that look
        // sees it.
        self.any
            .store(keys.waiting, std::sync::atomic::Ordering::SeqCst);
        metrics::gauge!("guestlist_http_waiting").increment(1.0);
        Some(Waiter {
            room: Arc::clone(self),
            id,
            key: wait,
        })
    }

    /// What wakes `key`'s waiters once the attempt holding it ends.
    pub(crate) fn wake_on_drop(self: &Arc<Self>, scope: &Scope, key: &IdempotencyKey) -> Wake {
        Wake {
            room: Arc::clone(self),
            id: id_of(scope, key),
        }
    }

    /// How many requests wait now, on all keys.
    #[cfg(test)]
    pub(crate) fn waiting(&self) -> usize {
        self.lock().waiting
    }
}

impl Waiter {
    /// Resolves once the key may have changed hands (an attempt of this process ended).
    pub(crate) fn woken(&self) -> tokio::sync::futures::Notified<'_> {
        self.key.woken.notified()
    }
}

impl Drop for Waiter {
    fn drop(&mut self) {
        use std::sync::atomic::Ordering::Relaxed;
        let mut keys = self.room.lock();
        keys.waiting -= 1;
        let left = keys.waiting;
        self.room
            .any
            .store(left, std::sync::atomic::Ordering::SeqCst);
        if self.key.waiting.fetch_sub(1, Relaxed) == 1 {
            keys.by_key.remove(&self.id);
        }
        metrics::gauge!("guestlist_http_waiting").decrement(1.0);
    }
}

impl Drop for Wake {
    fn drop(&mut self) {
        // The common case, no request waiting anywhere, takes no lock.
        if self.room.any.load(std::sync::atomic::Ordering::SeqCst) == 0 {
            return;
        }
        let keys = self.room.lock();
        if let Some(wait) = keys.by_key.get(&self.id) {
            wait.woken.notify_waiters();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key(name: &str) -> (Scope, IdempotencyKey) {
        (
            Scope::new("client").unwrap(),
            IdempotencyKey::new(name).unwrap(),
        )
    }

    #[test]
    fn the_caps_hold_and_a_leaving_waiter_frees_its_place() {
        let room = Arc::new(WaitRoom::new(2, 3));
        let (scope, a) = key("a");
        let (_, b) = key("b");
        let first = room.enter(&scope, &a).unwrap();
        let _second = room.enter(&scope, &a).unwrap();
        assert!(room.enter(&scope, &a).is_none(), "two per key");
        let _third = room.enter(&scope, &b).unwrap();
        assert!(room.enter(&scope, &b).is_none(), "three in all");
        drop(first);
        let again = room.enter(&scope, &a);
        assert!(again.is_some(), "a place freed");
        assert_eq!(room.waiting(), 3);
        drop(again);
        assert_eq!(room.waiting(), 2);
    }

    #[tokio::test]
    async fn an_ending_attempt_wakes_its_keys_waiters_only() {
        let room = Arc::new(WaitRoom::new(10, 10));
        let (scope, a) = key("a");
        let (_, b) = key("b");
        let on_a = room.enter(&scope, &a).unwrap();
        let on_b = room.enter(&scope, &b).unwrap();
        let (woken_a, woken_b) = (on_a.woken(), on_b.woken());
        tokio::pin!(woken_a, woken_b);
        woken_a.as_mut().enable();
        woken_b.as_mut().enable();
        drop(room.wake_on_drop(&scope, &a));
        tokio::time::timeout(std::time::Duration::from_secs(1), woken_a)
            .await
            .expect("a's waiter woken");
        let b_woken = tokio::time::timeout(std::time::Duration::from_millis(50), woken_b).await;
        assert!(b_woken.is_err(), "b's waiter sleeps on");
    }
}
