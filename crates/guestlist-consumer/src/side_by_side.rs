//! A batch's messages in steps side by side (`Consumer::steps_together`): run together through
//! the inbox, their steps journaled together, then each settled with what its run came to.

use std::sync::Arc;

use guestlist_core::{Deferral, FailureKind};
use guestlist_sqlx::{Backend, ProcessError, Stepped};

use crate::failure::Failure;
use crate::handled::Handled;
use crate::outage::{Held, Outage};
use crate::runtime::Core;
use crate::{Delivery, Handler, Message};

impl<DB: Backend, H: Handler<DB>> Core<DB, H> {
    /// The messages of `ready` side by side, then each settled in order; `None` where the
    /// handler does not run in steps (the consumer goes on as usual). A message whose delivery
    /// was withdrawn meanwhile (one before it handed back, on Kafka or SQS FIFO) comes again,
    /// a duplicate then.
    pub(crate) async fn side_by_side<D: Delivery>(
        &self,
        ready: &[(Arc<D>, Arc<Message>)],
        handled: &mut Handled,
    ) -> Option<Result<(), Held<D>>> {
        let messages: Vec<Arc<Message>> = ready.iter().map(|(_, m)| Arc::clone(m)).collect();
        let outcomes = Arc::clone(&self.handler)
            .together(
                &self.inbox,
                &self.pool,
                &self.name,
                &messages,
                self.handler_timeout,
            )
            .await?;
        for (at, ((delivery, message), (outcome, deferred))) in
            ready.iter().zip(outcomes).enumerate()
        {
            if delivery.withdrawn() {
                message.outcome("withdrawn");
                self.withdrawn(delivery.as_ref(), &message.id).await;
                continue;
            }
            let settled = self
                .settle_outcome(delivery.as_ref(), message, outcome, deferred, handled)
                .await;
            if let Err(outage) = settled {
                let unsettled = ready[at..].iter().map(|(d, _)| Arc::clone(d)).collect();
                return Some(Err((outage, unsettled)));
            }
        }
        Some(Ok(()))
    }

    /// Settles `message` with what its run came to (and the deferral it recorded): counted,
    /// acknowledged, deferred, handed back or dead-lettered. `Err` when the database is down.
    pub(crate) async fn settle_outcome<D: Delivery>(
        &self,
        delivery: &D,
        message: &Arc<Message>,
        outcome: Result<Stepped<()>, ProcessError<Failure>>,
        deferred: Option<Deferral>,
        handled: &mut Handled,
    ) -> Result<(), Outage> {
        match outcome {
            Ok(Stepped::Ran(())) => {
                message.outcome("fresh");
                handled.fresh += 1;
                self.count("fresh", 1);
                self.ack(delivery).await;
                self.done_with(delivery, &message.id).await;
            }
            Ok(Stepped::Duplicate) => {
                message.outcome("duplicate");
                handled.duplicates += 1;
                self.count("duplicate", 1);
                self.ack(delivery).await;
                self.done_with(delivery, &message.id).await;
            }
            Ok(Stepped::InFlight { retry_after }) => {
                // Another run holds the message's steps: "not yet", for what its lease has left.
                let not_yet = Deferral::new(retry_after, "another run holds the message's steps");
                return self.defer(delivery, message, &not_yet, handled).await;
            }
            Err(ProcessError::Handler(failure)) => {
                return self
                    .settle_failure(delivery, message, failure, deferred, handled)
                    .await;
            }
            Err(ProcessError::Store(err)) if err.kind() == FailureKind::Outage => {
                message.outcome("outage");
                return Err(Outage(format!("the database: {err}")));
            }
            Err(err) => {
                // The store failed, not the message: back it goes, without counting against it.
                message.outcome("store failed");
                tracing::warn!(handler = %self.name, id = %message.id, error = %err, "store failed; the message comes back later");
                self.hand_back(delivery, &message.id, self.backoff.0).await;
            }
        }
        Ok(())
    }
}
