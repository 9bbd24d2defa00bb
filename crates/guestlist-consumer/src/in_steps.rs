//! A [`StepHandler`] as a consumer runs it: a message at a time, through the steps' journal.

use std::sync::Arc;
use std::time::Duration;

use guestlist_core::HandlerName;
use guestlist_sqlx::{Backend, Inbox, ProcessError, Stepped, Steps, WorkError};
use sqlx::Pool;
use tracing::Instrument;

use crate::failure::Failure;
use crate::handler::Ran;
use crate::{Handler, Message, StepHandler};

/// A [`StepHandler`] as a consumer runs it: each message on its own, through
/// [`Inbox::process_steps`](guestlist_sqlx::Inbox::process_steps), never on a batch's
/// transaction. [`Consumer::with_steps`](crate::Consumer::with_steps) makes one.
#[derive(Debug, Clone)]
pub struct InSteps<H>(pub H);

impl<DB: Backend, H: StepHandler<DB>> Handler<DB> for InSteps<H> {
    type Error = std::io::Error;

    /// Never asked by the consumer, which runs a handler in steps alone (see
    /// [`StepHandler`]): it says so as an error.
    async fn handle(
        &self,
        _tx: &mut DB::Connection,
        _message: &Message,
    ) -> Result<(), std::io::Error> {
        Err(std::io::Error::other(
            "a handler in steps runs on its own, never on a batch's transaction",
        ))
    }

    fn batches(&self) -> bool {
        false
    }

    async fn alone(
        self: Arc<Self>,
        inbox: &Inbox<DB>,
        pool: &Pool<DB>,
        name: &HandlerName,
        message: Arc<Message>,
        limit: Duration,
    ) -> Result<Stepped<()>, ProcessError<Failure>> {
        // Each closure owns what it lends the handler, so that the run's future is `Send`.
        let (this, work_message) = (Arc::clone(&self), Arc::clone(&message));
        let finish_message = Arc::clone(&message);
        let run = inbox.process_steps(
            pool,
            name,
            &message.id,
            async move |steps| {
                this.0
                    .steps(steps, &work_message)
                    .await
                    .map_err(|err| Failure::Handler(err.into_boxed()))
            },
            async move |tx, done| {
                self.0
                    .finish(tx, &finish_message, done)
                    .await
                    .map_err(|err| Failure::Handler(err.into_boxed()))
            },
        );
        // The whole run, its steps and the final commit, within the handler timeout.
        let span = message.handler_span();
        match tokio::time::timeout(limit, run.instrument(span)).await {
            Ok(stepped) => stepped,
            Err(_) => Err(ProcessError::Handler(Failure::TimedOut(limit))),
        }
    }

    async fn together(
        self: Arc<Self>,
        inbox: &Inbox<DB>,
        pool: &Pool<DB>,
        name: &HandlerName,
        messages: &[Arc<Message>],
        limit: Duration,
    ) -> Option<Vec<Ran>> {
        // Each message's deferral, recorded inside its run, read back once the batch is done.
        let deferred: Vec<Arc<std::sync::Mutex<Option<guestlist_core::Deferral>>>> =
            messages.iter().map(|_| Arc::default()).collect();
        let runs = messages.iter().zip(&deferred).map(|(message, deferred)| {
            let (this, work_message) = (Arc::clone(&self), Arc::clone(message));
            let (finisher, finish_message) = (Arc::clone(&self), Arc::clone(message));
            let deferred = Arc::clone(deferred);
            let work = async move |steps: &mut Steps<DB>| {
                let span = work_message.handler_span();
                let run = tokio::time::timeout(limit, this.0.steps(steps, &work_message));
                let (ran, deferral) = guestlist_core::watch_deferral(run.instrument(span)).await;
                *deferred.lock().unwrap_or_else(|e| e.into_inner()) = deferral;
                match ran {
                    Ok(ran) => ran.map_err(|err| Failure::Handler(err.into_boxed())),
                    Err(_) => Err(Failure::TimedOut(limit)),
                }
            };
            let finish = async move |tx: &mut DB::Connection, done| {
                finisher
                    .0
                    .finish(tx, &finish_message, done)
                    .await
                    .map_err(|err| Failure::Handler(err.into_boxed()))
            };
            (message.id.clone(), work, finish)
        });
        let done = inbox.process_steps_batch(pool, name, runs).await;
        let deferred = deferred
            .iter()
            .map(|d| d.lock().unwrap_or_else(|e| e.into_inner()).take());
        Some(done.into_iter().zip(deferred).collect())
    }
}
