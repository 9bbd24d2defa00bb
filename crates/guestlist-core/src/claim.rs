//! What a claim found.

/// The result of claiming a message id for a handler.
///
/// `Fresh` means this transaction inserted the row: do the work, then commit. `Duplicate` means the
/// row was already there: the work was done before, so roll back and acknowledge.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[must_use = "a claim tells whether to do the work; ignoring it processes duplicates"]
pub enum Claim {
    /// First sight of this message for this handler: do the work in the same transaction.
    Fresh,
    /// Already handled (or being handled by a transaction that then committed): skip the work.
    Duplicate,
}

impl Claim {
    /// `true` for [`Claim::Fresh`].
    ///
    /// ```
    /// use guestlist_core::Claim;
    /// assert!(Claim::Fresh.is_fresh());
    /// assert!(!Claim::Duplicate.is_fresh());
    /// ```
    pub fn is_fresh(self) -> bool {
        matches!(self, Claim::Fresh)
    }

    /// The outcome's name as used in logs and metrics labels: `"fresh"` or `"duplicate"`.
    pub fn as_str(self) -> &'static str {
        match self {
            Claim::Fresh => "fresh",
            Claim::Duplicate => "duplicate",
        }
    }
}

impl std::fmt::Display for Claim {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}
