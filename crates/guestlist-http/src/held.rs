//! A claim that let its request run: the attempt that holds the key, and the three ways it
//! ends (its response stored, the key released, or the key kept locked), each on the mode's
//! slot (the request's transaction in transactional mode) without passing the key again.

use std::time::{Duration, Instant};

use guestlist_core::{
    Attempt, Completed, Fingerprint, IdempotencyKey, KeyClaim, Scope, StoredResponse,
};

use crate::body::BoxError;
use crate::mode::Mode;
use crate::outcome::Outcome;
use crate::waiting::Wake;

/// A keyed request's identity.
#[derive(Clone)]
pub(crate) struct Keyed {
    pub(crate) scope: Scope,
    pub(crate) key: IdempotencyKey,
}

/// The attempt that holds its key, with what its mode keeps until it ends.
pub(crate) struct Held<M: Mode> {
    slot: M::Slot,
    keyed: Keyed,
    attempt: Attempt,
    // When the attempt's lease ends (from the claim, on this process's clock: a bound for its
    // own retries only, never to judge the lease, which the store does on its own clock).
    lease_ends: Instant,
    _counted: InFlight,
    /// Wakes the requests waiting on the key once this attempt ends, however it ends.
    _wakes: Option<Wake>,
}

/// The gauge of keys this process holds in flight (`guestlist_http_keys_in_flight`): one more
/// while an attempt holds its key, however it ends.
struct InFlight;

impl InFlight {
    fn count() -> Self {
        metrics::gauge!("guestlist_http_keys_in_flight").increment(1.0);
        Self
    }
}

impl Drop for InFlight {
    fn drop(&mut self) {
        metrics::gauge!("guestlist_http_keys_in_flight").decrement(1.0);
    }
}

/// A claim that did not let its request run: why (a replay, in flight, another payload, the
/// store's failure).
pub(crate) type NotRun = Result<KeyClaim, BoxError>;

impl<M: Mode> Held<M> {
    /// Claims `keyed` on `slot`: the attempt that holds it, or why the request does not run
    /// (its slot ended, as a claim made on the request's transaction must be).
    pub(crate) async fn claim(
        mode: &M,
        slot: M::Slot,
        keyed: Keyed,
        fingerprint: &Fingerprint,
        lease: Duration,
    ) -> Result<Self, NotRun> {
        let asked = Instant::now();
        let claimed = mode
            .claim(&slot, &keyed.scope, &keyed.key, fingerprint, lease)
            .await;
        match claimed {
            Ok(KeyClaim::Run { attempt }) => Ok(Self {
                slot,
                keyed,
                attempt,
                lease_ends: asked + lease,
                _counted: InFlight::count(),
                _wakes: None,
            }),
            other => {
                // A claim made on the request's transaction found the key taken: end it.
                if let Err(err) = mode.finish(slot, false).await {
                    tracing::error!(error = %err, "cannot end the request's transaction");
                }
                Err(other)
            }
        }
    }

    /// Wakes `wake`'s waiters once this attempt ends (its response stored and committed, its
    /// key released or kept locked, or its task gone).
    pub(crate) fn waking(mut self, wake: Wake) -> Self {
        self._wakes = Some(wake);
        self
    }

    /// The attempt.
    pub(crate) fn attempt(&self) -> Attempt {
        self.attempt
    }

    /// The key it holds.
    pub(crate) fn keyed(&self) -> &Keyed {
        &self.keyed
    }

    /// Stores `response` if the attempt still holds the key (transactional: and commits).
    pub(crate) async fn complete(
        self,
        mode: &M,
        response: &StoredResponse,
    ) -> Result<Completed, BoxError> {
        let Keyed { scope, key } = &self.keyed;
        mode.complete(
            self.slot,
            scope,
            key,
            self.attempt,
            response,
            self.lease_ends,
        )
        .await
    }

    /// Releases the key so that a retry runs again (transactional: after rolling back); a
    /// failure is logged, and the retry takes over once the lease ends.
    pub(crate) async fn release(self, mode: &M) {
        Outcome::Released.record();
        let Keyed { scope, key } = &self.keyed;
        if let Err(err) = mode.release(self.slot, scope, key, self.attempt).await {
            tracing::error!(error = %err, "cannot release the key; a retry can take over once its lease ends");
        }
    }

    /// Gives the key back before the handler ran (its scope is over a cap): not counted as a
    /// release, since the request never ran.
    pub(crate) async fn give_back(self, mode: &M) {
        let Keyed { scope, key } = &self.keyed;
        if let Err(err) = mode.release(self.slot, scope, key, self.attempt).await {
            tracing::error!(error = %err, "cannot release a key refused for its scope's cap; a retry can take over once its lease ends");
        }
    }

    /// Neither stores nor releases: the key stays locked until its lease ends (transactional:
    /// the handler's writes roll back).
    pub(crate) async fn keep_locked(self, mode: &M) {
        let Keyed { scope, key } = &self.keyed;
        if let Err(err) = mode.keep_locked(self.slot, scope, key, self.attempt).await {
            tracing::error!(error = %err, "cannot keep the key locked");
        }
    }
}
