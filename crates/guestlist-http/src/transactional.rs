//! Transactional mode: the handler's writes and the stored response commit together.

use std::sync::Arc;
use std::time::{Duration, Instant};

use guestlist_core::{
    Attempt, Completed, Fingerprint, IdempotencyKey, KeyClaim, KeyStore, Scope, ScopeUsage,
    StoredResponse,
};
use guestlist_sqlx::{Backend, SqlKeyStore};
use http::Extensions;
use sqlx::Transaction;
use tokio::sync::{Mutex, OwnedMutexGuard};

use crate::body::BoxError;
use crate::mode::{Mode, sealed};

/// Transactional mode on a SQL key store: the handler takes the request's transaction with
/// [`IdempotentTx`], and the layer stores the response on that same transaction before it
/// commits. A handler that fails or answers 5xx rolls back with its response; an attempt that
/// lost its lease to a take-over finds the key fenced and rolls back its writes.
///
/// By default the claim commits on its own before the handler runs. On PostgreSQL,
/// [`IdempotencyLayer::claim_in_transaction`](crate::IdempotencyLayer::claim_in_transaction)
/// writes it on the handler's transaction instead, guarded by an advisory lock.
pub struct Transactional<DB: Backend> {
    pub(crate) store: SqlKeyStore<DB>,
    /// Whether the claim is written on the request's transaction
    /// ([`SqlKeyStore::claim_locked`]), where the database offers it.
    pub(crate) claim_on_tx: bool,
}

impl<DB: Backend> Transactional<DB> {
    pub(crate) fn new(store: SqlKeyStore<DB>) -> Self {
        Self {
            store,
            claim_on_tx: false,
        }
    }
}

impl<DB: Backend> Clone for Transactional<DB> {
    fn clone(&self) -> Self {
        Self {
            store: self.store.clone(),
            claim_on_tx: self.claim_on_tx,
        }
    }
}

impl<DB: Backend> std::fmt::Debug for Transactional<DB> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Transactional")
            .field("store", &self.store)
            .field("claim_in_transaction", &self.claim_on_tx)
            .finish()
    }
}

/// The request's transaction, begun on first use and shared between the handler and the layer.
pub struct TxSlot<DB: Backend> {
    store: SqlKeyStore<DB>,
    tx: Arc<Mutex<Option<Transaction<'static, DB>>>>,
    /// The claim written on the transaction, once it runs: what keeping the key locked writes
    /// again.
    claimed: Arc<std::sync::Mutex<Option<Claimed>>>,
    /// What the request's steps need: its fingerprint, once a claim committed on its own let
    /// it run, and whether its steps were journaled (their journal goes with the answer).
    pub(crate) steps: Arc<std::sync::Mutex<StepsSeat>>,
}

/// What [`IdempotentSteps`](crate::IdempotentSteps) learns from the layer, and tells it back.
#[derive(Debug, Default)]
pub(crate) struct StepsSeat {
    /// The request's fingerprint, where its claim committed on its own.
    pub(crate) fingerprint: Option<Fingerprint>,
    /// Whether the handler took its steps: the journal is forgotten with the stored answer.
    pub(crate) journaled: bool,
}

/// A claim on the request's transaction that let its attempt run.
struct Claimed {
    scope: Scope,
    key: IdempotencyKey,
    fingerprint: Fingerprint,
    attempt: Attempt,
    lease: Duration,
}

impl<DB: Backend> Clone for TxSlot<DB> {
    fn clone(&self) -> Self {
        Self {
            store: self.store.clone(),
            tx: Arc::clone(&self.tx),
            claimed: Arc::clone(&self.claimed),
            steps: Arc::clone(&self.steps),
        }
    }
}

impl<DB: Backend> std::fmt::Debug for TxSlot<DB> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TxSlot").finish_non_exhaustive()
    }
}

impl<DB: Backend> TxSlot<DB> {
    /// The key store the request runs on.
    pub(crate) fn store(&self) -> &SqlKeyStore<DB> {
        &self.store
    }

    /// The seat of the request's steps.
    pub(crate) fn steps_seat(&self) -> std::sync::MutexGuard<'_, StepsSeat> {
        self.steps.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The request's transaction, begun now if the handler is the first to ask.
    pub async fn take(&self) -> Result<IdempotentTx<DB>, guestlist_sqlx::Error> {
        let mut guard = Arc::clone(&self.tx).lock_owned().await;
        if guard.is_none() {
            *guard = Some(self.store.begin().await?);
        }
        Ok(IdempotentTx { guard })
    }

    /// Takes the transaction back from the handler, if it began one. A handler that still holds
    /// it after answering (it moved it into a task, say) gets no commit: waiting would hang the
    /// request, and on SQLite every writer with it.
    fn reclaim(&self) -> Result<Option<Transaction<'static, DB>>, BoxError> {
        match self.tx.try_lock() {
            Ok(mut slot) => Ok(slot.take()),
            Err(_) => Err(
                "the handler still holds its IdempotentTx after answering; drop it \
                           before returning, or nothing it wrote will commit"
                    .into(),
            ),
        }
    }
}

/// The request's database transaction, for a handler behind
/// [`IdempotencyLayer::transactional`](crate::IdempotencyLayer::transactional).
///
/// Use it as the connection for the handler's writes (`.execute(&mut *tx)`); do not commit it:
/// the layer stores the response on it and commits both together after the handler returns, or
/// rolls both back when the handler answers 5xx.
pub struct IdempotentTx<DB: Backend> {
    guard: OwnedMutexGuard<Option<Transaction<'static, DB>>>,
}

impl<DB: Backend> std::ops::Deref for IdempotentTx<DB> {
    type Target = DB::Connection;

    fn deref(&self) -> &DB::Connection {
        self.guard
            .as_ref()
            .expect("the transaction is present while the handler holds it")
    }
}

impl<DB: Backend> std::ops::DerefMut for IdempotentTx<DB> {
    fn deref_mut(&mut self) -> &mut DB::Connection {
        self.guard
            .as_mut()
            .expect("the transaction is present while the handler holds it")
    }
}

impl<DB: Backend> std::fmt::Debug for IdempotentTx<DB> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("IdempotentTx").finish_non_exhaustive()
    }
}

#[cfg(feature = "axum")]
impl<DB: Backend, S: Send + Sync> axum_core::extract::FromRequestParts<S> for IdempotentTx<DB> {
    type Rejection = crate::IdempotentTxRejection;

    async fn from_request_parts(
        parts: &mut http::request::Parts,
        _: &S,
    ) -> Result<Self, Self::Rejection> {
        let Some(slot) = parts.extensions.get::<TxSlot<DB>>().cloned() else {
            tracing::error!("IdempotentTx used on a route without IdempotencyLayer::transactional");
            return Err(crate::IdempotentTxRejection::MissingLayer);
        };
        slot.take().await.map_err(|err| {
            tracing::error!(error = %err, "cannot begin the handler's transaction");
            crate::IdempotentTxRejection::StoreUnavailable(err)
        })
    }
}

impl<DB: Backend> sealed::Sealed for Transactional<DB> {}

impl<DB: Backend> Mode for Transactional<DB> {
    type Slot = TxSlot<DB>;
    const TRANSACTIONAL: bool = true;

    async fn claim(
        &self,
        slot: &TxSlot<DB>,
        scope: &Scope,
        key: &IdempotencyKey,
        fingerprint: &Fingerprint,
        lease: Duration,
    ) -> Result<KeyClaim, BoxError> {
        if !self.claim_on_tx {
            slot.steps_seat().fingerprint = Some(*fingerprint);
            return Ok(self.store.claim(scope, key, fingerprint, lease).await?);
        }
        let mut tx = slot.take().await?;
        let claimed = self
            .store
            .claim_locked(&mut tx, scope, key, fingerprint, lease)
            .await?;
        if let KeyClaim::Run { attempt } = claimed {
            *slot.claimed.lock().unwrap_or_else(|e| e.into_inner()) = Some(Claimed {
                scope: scope.clone(),
                key: key.clone(),
                fingerprint: *fingerprint,
                attempt,
                lease,
            });
        }
        Ok(claimed)
    }

    fn open(&self, extensions: &mut Extensions) -> TxSlot<DB> {
        let slot = TxSlot {
            store: self.store.clone(),
            tx: Arc::new(Mutex::new(None)),
            claimed: Arc::new(std::sync::Mutex::new(None)),
            steps: Arc::default(),
        };
        extensions.insert(slot.clone());
        slot
    }

    async fn complete(
        &self,
        slot: TxSlot<DB>,
        scope: &Scope,
        key: &IdempotencyKey,
        attempt: Attempt,
        response: &StoredResponse,
        _lease_ends: Instant,
    ) -> Result<Completed, BoxError> {
        let mut tx = match slot.reclaim()? {
            Some(tx) => tx,
            None => self.store.begin().await?,
        };
        // The fencing check runs inside the handler's transaction: a stale attempt's writes
        // roll back together with its response.
        match self
            .store
            .complete_in(&mut tx, scope, key, attempt, response)
            .await?
        {
            Completed::Stored => {
                // The request's steps journal goes with its answer.
                if slot.steps_seat().journaled {
                    self.store.forget_steps(&mut tx, scope, key).await?;
                }
                tx.commit().await?;
                Ok(Completed::Stored)
            }
            Completed::Fenced => {
                tx.rollback().await?;
                Ok(Completed::Fenced)
            }
        }
    }

    async fn release(
        &self,
        slot: TxSlot<DB>,
        scope: &Scope,
        key: &IdempotencyKey,
        attempt: Attempt,
    ) -> Result<(), BoxError> {
        let held = match slot.reclaim() {
            Ok(Some(tx)) => tx.rollback().await.map_err(BoxError::from),
            Ok(None) => Ok(()),
            Err(err) => Err(err),
        };
        // A transaction the handler still holds never commits: the key is free either way.
        // A claim on the transaction went with its rollback (or goes when the handler lets go).
        if !self.claim_on_tx {
            self.store.release(scope, key, attempt).await?;
        }
        held
    }

    async fn finish(&self, slot: TxSlot<DB>, keep: bool) -> Result<(), BoxError> {
        match slot.reclaim()? {
            Some(tx) if keep => tx.commit().await?,
            Some(tx) => tx.rollback().await?,
            None => {}
        }
        Ok(())
    }

    async fn usage(&self, scope: &Scope) -> Result<Option<ScopeUsage>, BoxError> {
        let mut usage = self.store.usage(scope).await?;
        if self.claim_on_tx {
            // This request's claim is on its own transaction, not yet visible to the count.
            usage.in_flight += 1;
            usage.keys += 1;
        }
        Ok(Some(usage))
    }

    async fn in_flight_ended(&self, scope: &Scope, key: &IdempotencyKey) {
        self.store.in_flight_ended(scope, key).await;
    }

    async fn keep_locked(
        &self,
        slot: TxSlot<DB>,
        scope: &Scope,
        key: &IdempotencyKey,
        attempt: Attempt,
    ) -> Result<(), BoxError> {
        let claimed = slot
            .claimed
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .take();
        match (claimed, slot.reclaim()?) {
            // The claim is on the transaction: undo the writes and commit the claim alone.
            (Some(c), Some(tx)) => {
                let store = &self.store;
                store
                    .keep_locked(tx, &c.scope, &c.key, &c.fingerprint, c.attempt, c.lease)
                    .await?;
            }
            // The claim committed on its own and stays until its lease ends.
            (_, tx) => {
                if let Some(tx) = tx {
                    tx.rollback().await?;
                }
                self.store.keep_for_lease(scope, key, attempt).await?;
            }
        }
        Ok(())
    }
}
