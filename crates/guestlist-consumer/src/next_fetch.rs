//! The next batch's fetch, started before a batch commits so that it runs while the commit
//! waits on the disk.

use std::future::Future;
use std::pin::Pin;

/// The next batch's fetch, run while a batch commits: not yet awaited, or done.
pub(crate) enum Next<F: Future> {
    /// Started, not yet awaited.
    Waiting(Pin<Box<F>>),
    /// Awaited beside the commit: what it fetched.
    Fetched(F::Output),
}

impl<F: Future> Next<F> {
    /// What the fetch brought, awaiting it if the commit did not.
    pub(crate) async fn output(self) -> F::Output {
        match self {
            Next::Waiting(fetch) => fetch.await,
            Next::Fetched(output) => output,
        }
    }
}
