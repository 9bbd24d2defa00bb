//! Where idempotency keys live, and what a lookup finds.

use std::future::Future;
use std::time::Duration;

use crate::{Fingerprint, IdempotencyKey, Scope, StoredResponse};

/// Which attempt at a key holds its lease: its number, and a random fencing token.
///
/// Every claim and every take-over of an expired lease draws a new token, and completing or
/// releasing the key requires the token of the attempt that holds it. An attempt that lost its
/// lease can therefore neither overwrite the response of the attempt that took over, nor that of
/// a later request which claimed the key again after a release or a purge: numbers restart, tokens
/// do not repeat.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Attempt {
    number: u32,
    token: u64,
}

impl Attempt {
    /// Attempt `number` (1 for a new claim) holding the fencing token `token`.
    pub fn new(number: u32, token: u64) -> Self {
        Self { number, token }
    }

    /// 1 for the first attempt, one more for each take-over.
    pub fn number(self) -> u32 {
        self.number
    }

    /// The fencing token.
    pub fn token(self) -> u64 {
        self.token
    }

    /// `true` for an attempt that took over from a crashed or stalled one.
    pub fn is_takeover(self) -> bool {
        self.number > 1
    }
}

/// What the store found when a request arrived with a key.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum KeyClaim {
    /// Run the handler: the key is new (attempt 1) or its previous attempt's lease expired
    /// (a take-over). The key is now locked for the lease.
    Run {
        /// The fencing token this attempt must present to complete or release the key.
        attempt: Attempt,
    },
    /// The request already ran: replay this response.
    Replay(StoredResponse),
    /// Another attempt holds the key and its lease is still valid: ask the client to retry later.
    InFlight {
        /// How long until the lease ends.
        retry_after: Duration,
    },
    /// The key was used before for a different request (another fingerprint).
    Mismatch,
}

/// What completing a key did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Completed {
    /// The response is stored; retries will replay it.
    Stored,
    /// This attempt no longer holds the key (its lease expired and another took over): nothing
    /// was stored, and in transactional mode its writes must roll back.
    Fenced,
}

/// A store of idempotency keys used outside the handler's transaction ("plain mode"): each call
/// commits on its own. SQL stores also offer a transactional mode; Redis offers only this.
pub trait KeyStore: Clone + Send + Sync + 'static {
    /// The store's error.
    type Error: std::error::Error + Send + Sync + 'static;

    /// Claims `key` in `scope` insert-first, or reports what holds it.
    fn claim(
        &self,
        scope: &Scope,
        key: &IdempotencyKey,
        fingerprint: &Fingerprint,
        lease: Duration,
    ) -> impl Future<Output = Result<KeyClaim, Self::Error>> + Send;

    /// Stores `response` for `key` if `attempt` still holds it.
    fn complete(
        &self,
        scope: &Scope,
        key: &IdempotencyKey,
        attempt: Attempt,
        response: &StoredResponse,
    ) -> impl Future<Output = Result<Completed, Self::Error>> + Send;

    /// Forgets `key` if `attempt` still holds it, so that a retry runs the request again (the
    /// handler failed, or returned a status the policy does not store). `true` when the key
    /// went; `false` when this attempt no longer held it (taken over, or a response stored),
    /// and nothing changed.
    fn release(
        &self,
        scope: &Scope,
        key: &IdempotencyKey,
        attempt: Attempt,
    ) -> impl Future<Output = Result<bool, Self::Error>> + Send;

    /// Keeps `key` locked until the lease of `attempt` ends even if this process dies meanwhile:
    /// the attempt ended, but its work may have happened (the layer's `KeepLocked`). A store
    /// that frees the key of a dead process's attempt at once forgets the process here; the
    /// default, for stores whose keys always wait for the lease, does nothing.
    fn keep_for_lease(
        &self,
        scope: &Scope,
        key: &IdempotencyKey,
        attempt: Attempt,
    ) -> impl Future<Output = Result<(), Self::Error>> + Send {
        let _ = (scope, key, attempt);
        async { Ok(()) }
    }

    /// Resolves once `key` of `scope`, found in flight, may have been answered or released by
    /// another process, as the store's notifications tell (PostgreSQL's `NOTIFY`, Redis's
    /// `PUBLISH`), so that a request waiting on it looks again at once. The default, for stores
    /// that send none, never resolves: the waiting request polls the key.
    fn in_flight_ended(
        &self,
        scope: &Scope,
        key: &IdempotencyKey,
    ) -> impl Future<Output = ()> + Send {
        let _ = (scope, key);
        std::future::pending()
    }

    /// What `scope` holds now, for per-client caps; `None` (the default) where the store cannot
    /// count it.
    fn usage(
        &self,
        scope: &Scope,
    ) -> impl Future<Output = Result<Option<ScopeUsage>, Self::Error>> + Send {
        let _ = scope;
        async { Ok(None) }
    }
}

/// What one scope (one client) holds in a key store.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ScopeUsage {
    /// Keys whose first attempt has not finished.
    pub in_flight: u64,
    /// Keys stored, in flight or answered, within the store's retention.
    pub keys: u64,
}
