//! Where the response is stored: on its own ("plain"), or on the handler's transaction.

use std::future::Future;
use std::time::{Duration, Instant};

use guestlist_core::{
    Attempt, Completed, Fingerprint, IdempotencyKey, KeyClaim, KeyStore, Scope, ScopeUsage,
    StoredResponse,
};
use http::Extensions;

use crate::body::BoxError;

/// How the layer stores responses: [`Plain`] on any [`KeyStore`], or transactional on a SQL
/// store ([`IdempotencyLayer::transactional`](crate::IdempotencyLayer::transactional)). Sealed.
pub trait Mode: Clone + Send + Sync + 'static + sealed::Sealed {
    /// What the mode keeps between the handler's start and its end (the transaction).
    #[doc(hidden)]
    type Slot: Send + 'static;
    /// Whether the handler's writes and the stored response commit together.
    #[doc(hidden)]
    const TRANSACTIONAL: bool;

    /// Claims the key or reports what holds it (transactional: possibly on the request's
    /// transaction, which `slot` holds).
    #[doc(hidden)]
    fn claim(
        &self,
        slot: &Self::Slot,
        scope: &Scope,
        key: &IdempotencyKey,
        fingerprint: &Fingerprint,
        lease: Duration,
    ) -> impl Future<Output = Result<KeyClaim, BoxError>> + Send;

    /// Prepares a request for the handler (transactional: a transaction it can take).
    #[doc(hidden)]
    fn open(&self, extensions: &mut Extensions) -> Self::Slot;

    /// Stores the response if the attempt still holds the key (transactional: and commits);
    /// plain mode tries again until `lease_ends`, when the attempt's lease does.
    #[doc(hidden)]
    fn complete(
        &self,
        slot: Self::Slot,
        scope: &Scope,
        key: &IdempotencyKey,
        attempt: Attempt,
        response: &StoredResponse,
        lease_ends: Instant,
    ) -> impl Future<Output = Result<Completed, BoxError>> + Send;

    /// Forgets the key so that a retry runs again (transactional: after rolling back).
    #[doc(hidden)]
    fn release(
        &self,
        slot: Self::Slot,
        scope: &Scope,
        key: &IdempotencyKey,
        attempt: Attempt,
    ) -> impl Future<Output = Result<(), BoxError>> + Send;

    /// Ends a request that ran without a key: commits the handler's transaction if `keep`.
    #[doc(hidden)]
    fn finish(
        &self,
        slot: Self::Slot,
        keep: bool,
    ) -> impl Future<Output = Result<(), BoxError>> + Send;

    /// What `scope` holds, this request's own claim included; `None` where the store cannot
    /// count.
    #[doc(hidden)]
    fn usage(
        &self,
        scope: &Scope,
    ) -> impl Future<Output = Result<Option<ScopeUsage>, BoxError>> + Send;

    /// Resolves once `key`, found in flight, may have been answered or released by another
    /// process ([`KeyStore::in_flight_ended`]); never where the store cannot tell.
    #[doc(hidden)]
    fn in_flight_ended(
        &self,
        scope: &Scope,
        key: &IdempotencyKey,
    ) -> impl Future<Output = ()> + Send;

    /// Ends an attempt whose work may have happened outside the database ([`KeepLocked`]): rolls
    /// back its writes, and keeps the key locked until the lease ends, even if this process
    /// dies meanwhile.
    ///
    /// [`KeepLocked`]: crate::KeepLocked
    #[doc(hidden)]
    fn keep_locked(
        &self,
        slot: Self::Slot,
        scope: &Scope,
        key: &IdempotencyKey,
        attempt: Attempt,
    ) -> impl Future<Output = Result<(), BoxError>> + Send;
}

pub(crate) mod sealed {
    /// Seals [`super::Mode`].
    #[allow(unreachable_pub)]
    pub trait Sealed {}
}

/// The pause after plain mode's first failed try to store a response; each next one is twice
/// as long, up to [`STORE_PAUSE_MAX`].
const STORE_PAUSE: Duration = Duration::from_millis(50);
/// The longest pause between two of plain mode's tries to store a response.
const STORE_PAUSE_MAX: Duration = Duration::from_secs(1);

/// Plain mode: the key store is written on its own, outside any handler transaction. It serves
/// handlers whose work is not in the same database (the gateway, Redis): a crash after the
/// handler's work and before the store's write leaves the key in flight until its lease ends,
/// and the retry then runs the handler again. A write of the response that fails (the store
/// away, the connection cut, the answer lost) is tried again until the attempt's lease ends (the
/// client's answer waits meanwhile), so that an outage shorter than the lease runs nothing
/// twice.
#[derive(Debug, Clone)]
pub struct Plain<K>(pub(crate) K);

impl<K: KeyStore> sealed::Sealed for Plain<K> {}

impl<K: KeyStore> Mode for Plain<K> {
    type Slot = ();
    const TRANSACTIONAL: bool = false;

    async fn claim(
        &self,
        (): &(),
        scope: &Scope,
        key: &IdempotencyKey,
        fingerprint: &Fingerprint,
        lease: Duration,
    ) -> Result<KeyClaim, BoxError> {
        Ok(self.0.claim(scope, key, fingerprint, lease).await?)
    }

    fn open(&self, _: &mut Extensions) {}

    async fn complete(
        &self,
        (): (),
        scope: &Scope,
        key: &IdempotencyKey,
        attempt: Attempt,
        response: &StoredResponse,
        lease_ends: Instant,
    ) -> Result<Completed, BoxError> {
        // The handler's work happened and no retry runs it again before the lease ends: a write
        // that failed (the store away, a connection cut, perhaps after the write landed) is tried
        // again until then, each try on the pool's next connection. A try after one that landed
        // finds the key answered already and changes nothing (it reports the attempt fenced).
        let mut pause = STORE_PAUSE;
        loop {
            match self.0.complete(scope, key, attempt, response).await {
                Ok(completed) => return Ok(completed),
                Err(err) if Instant::now() + pause < lease_ends => {
                    tracing::warn!(error = %err, "cannot store the response; trying again until the lease ends");
                    tokio::time::sleep(pause).await;
                    pause = (pause * 2).min(STORE_PAUSE_MAX);
                }
                Err(err) => return Err(err.into()),
            }
        }
    }

    async fn release(
        &self,
        (): (),
        scope: &Scope,
        key: &IdempotencyKey,
        attempt: Attempt,
    ) -> Result<(), BoxError> {
        // A key this attempt no longer holds is another attempt's to finish: nothing to do.
        self.0.release(scope, key, attempt).await?;
        Ok(())
    }

    async fn finish(&self, (): (), _: bool) -> Result<(), BoxError> {
        Ok(())
    }

    async fn usage(&self, scope: &Scope) -> Result<Option<ScopeUsage>, BoxError> {
        Ok(self.0.usage(scope).await?)
    }

    async fn in_flight_ended(&self, scope: &Scope, key: &IdempotencyKey) {
        self.0.in_flight_ended(scope, key).await;
    }

    async fn keep_locked(
        &self,
        (): (),
        scope: &Scope,
        key: &IdempotencyKey,
        attempt: Attempt,
    ) -> Result<(), BoxError> {
        // The claim was committed on its own and stays until its lease ends.
        Ok(self.0.keep_for_lease(scope, key, attempt).await?)
    }
}
