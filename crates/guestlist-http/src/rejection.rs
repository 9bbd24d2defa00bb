//! Why [`IdempotentTx`](crate::IdempotentTx) or [`IdempotentSteps`](crate::IdempotentSteps)
//! could not be extracted.

#[cfg(feature = "axum")]
use crate::problem::Problem;

/// The rejection of the [`IdempotentTx`](crate::IdempotentTx) and
/// [`IdempotentSteps`](crate::IdempotentSteps) extractors, as axum's own
/// extractors reject with a type: match on it in your own error handling, or let it answer
/// (an `application/problem+json` response, one of [the problem types]).
///
/// [the problem types]: https://github.com/guestlist-rs/guestlist/blob/main/docs/problems.md
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum IdempotentTxRejection {
    /// The route has no [`IdempotencyLayer::transactional`](crate::IdempotencyLayer::transactional)
    /// for this database type: the server is misconfigured. Answers 500
    /// `transaction-unavailable`.
    #[error(
        "IdempotentTx needs IdempotencyLayer::transactional on this route (with the same database \
         type); the server is misconfigured"
    )]
    MissingLayer,
    /// The handler's transaction could not begin: the database is down or out of connections.
    /// Answers 503 `store-unavailable` with `Retry-After: 1`; the client retries with the same
    /// key.
    #[error("cannot begin the handler's transaction: {0}")]
    StoreUnavailable(#[source] guestlist_sqlx::Error),
    /// `IdempotentSteps` on a request without an idempotency key (the layer lets keyless
    /// requests through): there is nothing to journal the steps under. Answers 400
    /// `key-required`.
    #[error(
        "this endpoint runs its work in journaled steps, which need an Idempotency-Key header; \
         send one (a fresh UUID per operation, the same on every retry)"
    )]
    NoKey,
    /// `IdempotentSteps` behind a layer that writes its claim on the handler's transaction
    /// ([`claim_in_transaction`](crate::IdempotencyLayer::claim_in_transaction)): a step's
    /// journal must commit while the claim is still open. The server is misconfigured; answers
    /// 500 `transaction-unavailable`.
    #[error(
        "IdempotentSteps needs the key's claim committed on its own: drop \
         IdempotencyLayer::claim_in_transaction on this route"
    )]
    ClaimOnTransaction,
    /// The key was released after an earlier request failed, and is now reused for another
    /// request while the journal holds the first one's finished steps. Answers 422 `key-reused`
    /// and releases the key again (nothing is stored under it), so that the first request can
    /// still come back and finish.
    #[error(transparent)]
    JournalOfAnotherRequest(guestlist_sqlx::Error),
    /// A retry took the key over from this attempt (its lease ended): it runs no step. Answers
    /// 409 `attempt-superseded`.
    #[error("a retry took this request's key over; this attempt runs no step")]
    Superseded,
}

#[cfg(feature = "axum")]
impl IdempotentTxRejection {
    /// The problem this rejection answers with.
    pub(crate) fn problem(&self) -> Problem {
        match self {
            Self::MissingLayer => Problem::transaction_unavailable(self.to_string()),
            Self::StoreUnavailable(_) => Problem::store_unavailable(
                "the server could not begin a transaction; retry with the same key later"
                    .to_owned(),
            )
            .retry_after(1),
            Self::NoKey => Problem::key_required(self.to_string()),
            Self::ClaimOnTransaction => Problem::transaction_unavailable(self.to_string()),
            Self::JournalOfAnotherRequest(_) => {
                Problem::key_reused(http::StatusCode::UNPROCESSABLE_ENTITY, self.to_string())
            }
            Self::Superseded => Problem::attempt_superseded(self.to_string()),
        }
    }
}

#[cfg(feature = "axum")]
impl axum_core::response::IntoResponse for IdempotentTxRejection {
    fn into_response(self) -> axum_core::response::Response {
        let another = matches!(self, Self::JournalOfAnotherRequest(_));
        let mut response = self.problem().into_response().into_response();
        if another {
            // Not this key's answer: the request the journal belongs to may still finish.
            response
                .extensions_mut()
                .insert(crate::keep_locked::ReleaseKey);
        }
        response
    }
}
