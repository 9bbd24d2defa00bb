//! Why [`IdempotentTx`](crate::IdempotentTx) could not be extracted.

#[cfg(feature = "axum")]
use crate::problem::Problem;

/// The rejection of the [`IdempotentTx`](crate::IdempotentTx) extractor, as axum's own
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
        }
    }
}

#[cfg(feature = "axum")]
impl axum_core::response::IntoResponse for IdempotentTxRejection {
    fn into_response(self) -> axum_core::response::Response {
        self.problem().into_response().into_response()
    }
}
