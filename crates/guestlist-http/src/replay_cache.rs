//! Stored responses kept in memory, so that retries of a stored key skip the store.

use std::sync::Arc;
use std::time::{Duration, Instant};

use guestlist_core::{
    Attempt, Begin, Completed, Fingerprint, IdempotencyKey, KeyStore, Scope, ScopeUsage,
    StoredBody, StoredResponse,
};

/// A [`KeyStore`] that remembers the responses it replays, for a while.
///
/// A stored response never changes once written, so a retry of a key whose response this
/// process has already replayed is answered from memory (byte for byte, and with 422 for another
/// request's fingerprint, as the store would), without a round trip. Everything else goes to
/// the store: claims, completions, releases, and the first replay of each key.
///
/// The cache is bounded by bytes (bodies and headers, least recently used first out) and each
/// entry lives for a time to live. One consequence to know: a key removed from the store by an
/// operator (`guestlist keys evict`) or purged may still be replayed from a process's memory
/// until its entry's time to live ends.
///
/// ```
/// use std::time::Duration;
/// # fn wrap<K: guestlist_core::KeyStore>(store: K) {
/// let cached = guestlist_http::ReplayCache::new(store, 64 * 1024 * 1024, Duration::from_secs(60));
/// let layer = guestlist_http::IdempotencyLayer::new(cached);
/// # }
/// ```
#[derive(Clone)]
pub struct ReplayCache<K> {
    store: K,
    /// `None` when the cache is off (`max_bytes` of 0).
    entries: Option<Arc<Entries>>,
    ttl: Duration,
}

type Entries = quick_cache::sync::Cache<(Scope, IdempotencyKey), Arc<Entry>, ByBytes>;

struct Entry {
    fingerprint: Fingerprint,
    response: StoredResponse,
    until: Instant,
    bytes: u64,
}

#[derive(Clone)]
struct ByBytes;

impl quick_cache::Weighter<(Scope, IdempotencyKey), Arc<Entry>> for ByBytes {
    fn weight(&self, _: &(Scope, IdempotencyKey), entry: &Arc<Entry>) -> u64 {
        entry.bytes
    }
}

impl<K> std::fmt::Debug for ReplayCache<K> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ReplayCache")
            .field("entries", &self.entries.as_ref().map(|e| e.len()))
            .field("bytes", &self.entries.as_ref().map(|e| e.weight()))
            .field("ttl", &self.ttl)
            .finish_non_exhaustive()
    }
}

impl<K: KeyStore> ReplayCache<K> {
    /// Remembers up to `max_bytes` of replayed responses from `store`, each for `ttl`; with
    /// `max_bytes` 0 (or `ttl` zero) it remembers nothing and every call goes to the store.
    pub fn new(store: K, max_bytes: u64, ttl: Duration) -> Self {
        // A typical API answer is a few hundred bytes; the estimate only sizes the table.
        let estimated = usize::try_from((max_bytes / 512).clamp(16, 1 << 20)).unwrap_or(16);
        let on = max_bytes > 0 && !ttl.is_zero();
        Self {
            store,
            entries: on.then(|| {
                Arc::new(quick_cache::sync::Cache::with_weighter(
                    estimated, max_bytes, ByBytes,
                ))
            }),
            ttl,
        }
    }

    /// The store underneath.
    pub fn store(&self) -> &K {
        &self.store
    }

    fn remember(
        &self,
        scope: &Scope,
        key: &IdempotencyKey,
        fingerprint: &Fingerprint,
        response: &StoredResponse,
    ) {
        let Some(entries) = &self.entries else {
            return;
        };
        let body = match &response.body {
            StoredBody::Bytes(bytes) => bytes.len(),
            StoredBody::TooLarge => 0,
        };
        let headers: usize = response
            .headers
            .iter()
            .map(|(n, v)| n.len() + v.len())
            .sum();
        let bytes = (body + headers + scope.as_str().len() + key.as_str().len() + 128) as u64;
        entries.insert(
            (scope.clone(), key.clone()),
            Arc::new(Entry {
                fingerprint: *fingerprint,
                response: response.clone(),
                // A TTL too long to add means "for as long as the entry stays".
                until: Instant::now()
                    .checked_add(self.ttl)
                    .unwrap_or_else(|| Instant::now() + Duration::from_secs(86_400 * 365)),
                bytes,
            }),
        );
    }
}

impl<K: KeyStore> KeyStore for ReplayCache<K> {
    type Error = K::Error;

    async fn begin(
        &self,
        scope: &Scope,
        key: &IdempotencyKey,
        fingerprint: &Fingerprint,
        lease: Duration,
    ) -> Result<Begin, K::Error> {
        if let Some(entries) = &self.entries {
            let id = (scope.clone(), key.clone());
            if let Some(entry) = entries.get(&id) {
                if entry.until > Instant::now() {
                    return Ok(if entry.fingerprint == *fingerprint {
                        Begin::Replay(entry.response.clone())
                    } else {
                        Begin::Mismatch
                    });
                }
                entries.remove(&id);
            }
        }
        let begun = self.store.begin(scope, key, fingerprint, lease).await?;
        if let Begin::Replay(response) = &begun {
            self.remember(scope, key, fingerprint, response);
        }
        Ok(begun)
    }

    async fn complete(
        &self,
        scope: &Scope,
        key: &IdempotencyKey,
        attempt: Attempt,
        response: &StoredResponse,
    ) -> Result<Completed, K::Error> {
        self.store.complete(scope, key, attempt, response).await
    }

    async fn release(
        &self,
        scope: &Scope,
        key: &IdempotencyKey,
        attempt: Attempt,
    ) -> Result<(), K::Error> {
        self.store.release(scope, key, attempt).await
    }

    async fn usage(&self, scope: &Scope) -> Result<Option<ScopeUsage>, K::Error> {
        self.store.usage(scope).await
    }
}
