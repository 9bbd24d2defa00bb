//! What happened to a keyed request, for metrics and logs.

/// The outcomes counted in `guestlist_http_requests_total{outcome}`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Outcome {
    /// A new key: the handler ran and its response was stored.
    Fresh,
    /// An expired lease taken over: the handler ran again.
    LeaseTakeover,
    /// A stored response replayed.
    Replayed,
    /// Another attempt holds the key: 409.
    ConflictInFlight,
    /// The key was used for another request: 422.
    FingerprintMismatch,
    /// The handler failed or answered with a status the policy does not store: key released.
    Released,
    /// The handler could not tell whether its work happened ([`KeepLocked`](crate::KeepLocked)):
    /// the key stays locked until its lease ends.
    KeptLocked,
    /// The attempt lost its key to a take-over before it could store its response.
    Fenced,
    /// The request was refused before the handler: malformed key, no scope, body too large.
    Refused,
    /// The key store failed.
    StoreError,
    /// The client's scope was over a cap (keys in flight, or keys stored): 429, key released.
    OverQuota,
}

impl Outcome {
    pub(crate) fn as_str(self) -> &'static str {
        match self {
            Outcome::Fresh => "fresh",
            Outcome::LeaseTakeover => "lease_takeover",
            Outcome::Replayed => "replayed",
            Outcome::ConflictInFlight => "conflict_in_flight",
            Outcome::FingerprintMismatch => "fingerprint_mismatch",
            Outcome::Released => "released",
            Outcome::KeptLocked => "kept_locked",
            Outcome::Fenced => "fenced",
            Outcome::Refused => "refused",
            Outcome::StoreError => "store_error",
            Outcome::OverQuota => "over_quota",
        }
    }

    /// Counts this outcome and records it on the current span.
    pub(crate) fn record(self) {
        metrics::counter!("guestlist_http_requests_total", "outcome" => self.as_str()).increment(1);
        tracing::Span::current().record("guestlist.outcome", self.as_str());
    }
}
