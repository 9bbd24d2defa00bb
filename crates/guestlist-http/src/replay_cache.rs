//! Stored responses kept in memory, so that retries of a stored key skip the store.

use std::sync::Arc;
use std::time::{Duration, Instant};

use guestlist_core::{Fingerprint, IdempotencyKey, KeyClaim, Scope, StoredBody, StoredResponse};

/// Responses the layer stored or replayed, kept in this process's memory for a while, so that a
/// retry of their key is answered without a round trip to the store.
///
/// A stored response never changes once written. A retry whose key is remembered gets what the
/// store would give it, after the same checks: its scope (memory never crosses clients), its
/// fingerprint (another request with the key gets 422), and the stored headers, byte for byte,
/// marked `Idempotent-Replayed`. Everything else goes to the store: claims, completions,
/// releases, and the first replay of each key this process has not stored itself. It works in
/// every mode (plain, transactional, [`claim_in_transaction`]), since it answers before any of
/// them is asked.
///
/// It is bounded twice, and evicts the least recently used first: by `max_entries` (each entry
/// weighs at least `max_bytes / max_entries`), and by `max_bytes` (bodies, headers, key and
/// scope). Unique keys fill it and push older ones out; it never grows past either bound.
///
/// **The window.** An entry lives for `ttl`, and within it the process answers from memory
/// even if the store no longer has the key: an operator's `guestlist keys evict`, or the purge
/// once the key's retention is over, both on other instances. Set `ttl` no longer than the
/// keys' retention (the purge then never removes a key still remembered), and as short as the
/// evictions you need to take effect (the gateway's default is 60 s).
///
/// ```
/// use std::time::Duration;
/// # fn wrap<K: guestlist_core::KeyStore>(store: K) {
/// let layer = guestlist_http::IdempotencyLayer::new(store).replay_cache(
///     guestlist_http::ReplayCache::new(100_000, 64 * 1024 * 1024, Duration::from_secs(60)),
/// );
/// # }
/// ```
///
/// [`claim_in_transaction`]: crate::IdempotencyLayer::claim_in_transaction
#[derive(Clone)]
pub struct ReplayCache {
    /// `None` when the cache is off (a bound or the time to live of 0).
    entries: Option<Arc<Entries>>,
    ttl: Duration,
    floor: u64,
}

type Entries = quick_cache::sync::Cache<(Scope, IdempotencyKey), Arc<Entry>, ByWeight>;

struct Entry {
    fingerprint: Fingerprint,
    response: StoredResponse,
    until: Instant,
    weight: u64,
}

#[derive(Clone)]
struct ByWeight;

impl quick_cache::Weighter<(Scope, IdempotencyKey), Arc<Entry>> for ByWeight {
    fn weight(&self, _: &(Scope, IdempotencyKey), entry: &Arc<Entry>) -> u64 {
        entry.weight
    }
}

impl std::fmt::Debug for ReplayCache {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ReplayCache")
            .field("entries", &self.len())
            .field("weight", &self.entries.as_ref().map(|e| e.weight()))
            .field("ttl", &self.ttl)
            .finish_non_exhaustive()
    }
}

impl ReplayCache {
    /// Remembers at most `max_entries` responses and `max_bytes` of them, each for `ttl`; with
    /// any of the three 0 it remembers nothing, and every request goes to the store.
    pub fn new(max_entries: u64, max_bytes: u64, ttl: Duration) -> Self {
        let on = max_entries > 0 && max_bytes > 0 && !ttl.is_zero();
        let estimated = usize::try_from(max_entries.clamp(16, 1 << 22)).unwrap_or(1 << 22);
        Self {
            entries: on.then(|| {
                Arc::new(quick_cache::sync::Cache::with_weighter(
                    estimated, max_bytes, ByWeight,
                ))
            }),
            ttl,
            floor: max_bytes.div_ceil(max_entries.max(1)),
        }
    }

    /// A cache that remembers nothing.
    pub fn off() -> Self {
        Self::new(0, 0, Duration::ZERO)
    }

    /// Responses remembered now.
    pub fn len(&self) -> usize {
        self.entries.as_ref().map_or(0, |e| e.len())
    }

    /// Whether nothing is remembered.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// What the remembered responses weigh, in bytes (each at least `max_bytes / max_entries`).
    pub fn weight(&self) -> u64 {
        self.entries.as_ref().map_or(0, |e| e.weight())
    }

    /// What the store would answer a retry of `key` in `scope` with `fingerprint`, if this
    /// process remembers the key's response: a replay, or a mismatch.
    pub(crate) fn answer(
        &self,
        scope: &Scope,
        key: &IdempotencyKey,
        fingerprint: &Fingerprint,
    ) -> Option<KeyClaim> {
        let entries = self.entries.as_ref()?;
        let id = (scope.clone(), key.clone());
        let entry = entries.get(&id)?;
        if entry.until <= Instant::now() {
            entries.remove(&id);
            return None;
        }
        Some(if entry.fingerprint == *fingerprint {
            KeyClaim::Replay(entry.response.clone())
        } else {
            KeyClaim::Mismatch
        })
    }

    /// Remembers `response`, stored (durably: committed) for `key` in `scope` by the request
    /// with `fingerprint`.
    pub(crate) fn remember(
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
                // A time to live too long to add means "for as long as the entry stays".
                until: Instant::now()
                    .checked_add(self.ttl)
                    .unwrap_or_else(|| Instant::now() + Duration::from_secs(86_400 * 365)),
                weight: bytes.max(self.floor),
            }),
        );
    }
}
