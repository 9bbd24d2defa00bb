//! A step that meets an outage or a "not yet" is tried again in the process, with backoff, up
//! to the inbox's bound (DESIGN 4c); poison is returned at once.

use std::time::{Duration, Instant};

use guestlist_core::{Backoff, Deferral, FailureKind};
use tracing::Span;

use super::StepError;
use crate::WorkError;
use crate::failure::link_kind;

/// The tries of one step: whether a failed try is tried again, and after how long.
pub(super) struct Retry<'s> {
    bound: Duration,
    started: Instant,
    backoff: Backoff,
    tries: u32,
    span: &'s Span,
}

/// What to do after a failed try.
pub(super) enum After<X> {
    /// Try again after this pause.
    Again(Duration),
    /// Return this error.
    GiveUp(StepError<X>),
}

impl<'s> Retry<'s> {
    /// The tries of a step that may go on for `bound`, counted on `span`.
    pub(super) fn new(bound: Duration, span: &'s Span) -> Self {
        Self {
            bound,
            started: Instant::now(),
            backoff: Backoff::new(Duration::from_millis(50), Duration::from_secs(2)),
            tries: 0,
            span,
        }
    }

    /// Counts a try.
    pub(super) fn begin(&mut self) {
        self.tries += 1;
        self.span.record("attempts", self.tries);
    }

    /// After the try failed with `err` (having recorded `deferred`, if it did): again after a
    /// pause where it met an outage or a "not yet" and `bound` allows one more, else give up.
    /// Giving up on a "not yet", its deferral is recorded for whoever watches the whole run
    /// (the consumer hands the message back for its wait, uncounted).
    pub(super) fn after<X: WorkError>(
        &mut self,
        err: StepError<X>,
        deferred: Option<Deferral>,
    ) -> After<X> {
        let (err, kind) = classify(err);
        // Recorded with `defer` (`CarryKey` does), or returned inside the step's error.
        let deferral = deferred.or_else(|| kind.as_ref().and_then(|(_, found)| found.clone()));
        let pause = match (&kind, &deferral) {
            (_, Some(deferral)) => deferral.after(),
            (Some((FailureKind::Outage, _)), None) => self.backoff.next_pause(),
            _ => return After::GiveUp(err),
        };
        if self.started.elapsed() + pause > self.bound {
            if let Some(deferral) = deferral {
                guestlist_core::defer(deferral);
            }
            return After::GiveUp(err);
        }
        tracing::debug!(error = %err, ?pause, tries = self.tries, "a step met an outage or a \"not yet\"; trying it again");
        After::Again(pause)
    }
}

/// The kind of a step's failure, with the deferral its chain holds, if it says one.
fn classify<X: WorkError>(
    err: StepError<X>,
) -> (StepError<X>, Option<(FailureKind, Option<Deferral>)>) {
    match err {
        StepError::Step { step, error } => {
            let (error, found) =
                error.find_in_chain(|link| match link.downcast_ref::<Deferral>() {
                    Some(deferral) => Some((FailureKind::NotYet, Some(deferral.clone()))),
                    None => link_kind(link).map(|kind| (kind, None)),
                });
            (StepError::Step { step, error }, found)
        }
        StepError::Store(err) => {
            let kind = err.kind();
            (StepError::Store(err), Some((kind, None)))
        }
    }
}
