//! Steps behind transactional mode: a handler that calls several systems resumes, on a retry of
//! its request, after the last step it finished (DESIGN 4d).

use guestlist_sqlx::{Backend, Steps};

use crate::context::IdempotencyContext;
use crate::rejection::IdempotentTxRejection;
use crate::transactional::{IdempotentTx, TxSlot};

/// The journaled steps of a request behind
/// [`IdempotencyLayer::transactional`](crate::IdempotencyLayer::transactional), for a handler
/// that calls several systems: charge a card, reserve stock with a warehouse service, then write
/// the order.
///
/// It dereferences to [`Steps`]: each [`Steps::external`] call runs outside any transaction with
/// `scope:key/<step>` carried downstream, and its result is journaled in `<keys>_steps` once it
/// returns; each [`Steps::database`] step commits its writes with its journal row. When an
/// attempt dies between steps (the process is killed, a step times out, the handler answers
/// 5xx), the client's retry with the same key (once the lease ended, where the attempt died)
/// replays the finished steps' results without running them and goes on from the first
/// unfinished one. The final writes go on [`IdempotentSteps::transaction`], which commits them
/// with the stored answer; the journal goes with that commit.
///
/// Take the transaction after the steps: a database step runs on a transaction of its own, and
/// on SQLite it waits for the request's transaction's write lock.
///
/// ```no_run
/// # #[cfg(all(feature = "postgres", feature = "axum"))]
/// # mod example {
/// use axum::http::StatusCode;
/// use guestlist_http::IdempotentSteps;
/// use sqlx::Postgres;
///
/// async fn place_order(mut steps: IdempotentSteps<Postgres>, body: String) -> (StatusCode, String) {
///     let answer = async {
///         // Carries `scope:key/charge` to the payments service; journaled once it answers.
///         let charge: String = steps
///             .external("charge", || async { Ok::<_, anyhow::Error>("ch_1".to_owned()) })
///             .await?;
///         steps
///             .database("reserve", async |tx| {
///                 sqlx::query("UPDATE stock SET held = held + 1 WHERE sku = 'mug'")
///                     .execute(&mut *tx)
///                     .await
///                     .map(drop)
///             })
///             .await?;
///         let mut tx = steps.transaction().await?;
///         sqlx::query("INSERT INTO orders (body, charge) VALUES ($1, $2)")
///             .bind(&body)
///             .bind(&charge)
///             .execute(&mut *tx)
///             .await?;
///         Ok::<_, anyhow::Error>(charge)
///     };
///     match answer.await {
///         Ok(charge) => (StatusCode::CREATED, charge),
///         // A 5xx releases the key and keeps the journal: the retry resumes.
///         Err(err) => (StatusCode::SERVICE_UNAVAILABLE, err.to_string()),
///     }
/// }
/// # }
/// ```
pub struct IdempotentSteps<DB: Backend> {
    steps: Steps<DB>,
    slot: TxSlot<DB>,
}

impl<DB: Backend> IdempotentSteps<DB> {
    /// The steps of the request whose extensions are `extensions`: a tower service's way to
    /// take them (axum's is the extractor). [`IdempotentTxRejection::MissingLayer`] without
    /// [`IdempotencyLayer::transactional`](crate::IdempotencyLayer::transactional) in front.
    pub async fn from_extensions(
        extensions: &http::Extensions,
    ) -> Result<Self, IdempotentTxRejection> {
        let Some(slot) = extensions.get::<TxSlot<DB>>().cloned() else {
            tracing::error!(
                "IdempotentSteps used on a route without IdempotencyLayer::transactional"
            );
            return Err(IdempotentTxRejection::MissingLayer);
        };
        Self::of(slot, extensions.get::<IdempotencyContext>()).await
    }

    /// The steps of the request `slot` and `context` describe.
    async fn of(
        slot: TxSlot<DB>,
        context: Option<&IdempotencyContext>,
    ) -> Result<Self, IdempotentTxRejection> {
        let Some(context) = context else {
            return Err(IdempotentTxRejection::NoKey);
        };
        let Some(fingerprint) = slot.steps_seat().fingerprint else {
            return Err(IdempotentTxRejection::ClaimOnTransaction);
        };
        let steps = slot
            .store()
            .steps(&context.scope, &context.key, &fingerprint, context.attempt)
            .await
            .map_err(|err| match err {
                guestlist_sqlx::Error::JournalOfAnotherRequest { .. } => {
                    IdempotentTxRejection::JournalOfAnotherRequest(err)
                }
                guestlist_sqlx::Error::RunTakenOver { .. } => IdempotentTxRejection::Superseded,
                err => {
                    tracing::error!(error = %err, "cannot read the request's steps journal");
                    IdempotentTxRejection::StoreUnavailable(err)
                }
            })?;
        slot.steps_seat().journaled = true;
        Ok(Self { steps, slot })
    }

    /// The request's transaction, for the work's final writes: the layer stores the answer on
    /// it and commits both together (the steps' journal goes with them), or rolls both back
    /// when the handler answers 5xx. Take it after the last step.
    pub async fn transaction(&self) -> Result<IdempotentTx<DB>, guestlist_sqlx::Error> {
        self.slot.take().await
    }
}

impl<DB: Backend> std::ops::Deref for IdempotentSteps<DB> {
    type Target = Steps<DB>;

    fn deref(&self) -> &Steps<DB> {
        &self.steps
    }
}

impl<DB: Backend> std::ops::DerefMut for IdempotentSteps<DB> {
    fn deref_mut(&mut self) -> &mut Steps<DB> {
        &mut self.steps
    }
}

impl<DB: Backend> std::fmt::Debug for IdempotentSteps<DB> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("IdempotentSteps")
            .field("steps", &self.steps)
            .finish_non_exhaustive()
    }
}

#[cfg(feature = "axum")]
impl<DB: Backend, S: Send + Sync> axum_core::extract::FromRequestParts<S> for IdempotentSteps<DB> {
    type Rejection = IdempotentTxRejection;

    async fn from_request_parts(
        parts: &mut http::request::Parts,
        _: &S,
    ) -> Result<Self, Self::Rejection> {
        Self::from_extensions(&parts.extensions).await
    }
}
