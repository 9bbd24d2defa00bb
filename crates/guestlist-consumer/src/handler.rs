//! What a consumer runs for each fresh message.

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use guestlist_core::HandlerName;
use guestlist_sqlx::{Backend, Inbox, ProcessError, Processed, Stepped, WorkError};
use sqlx::Pool;
use tracing::Instrument;

use crate::Message;
use crate::failure::{Failure, timed};

/// The work a [`Consumer`](crate::Consumer) runs for each fresh message, on the transaction that
/// claimed it.
///
/// An async closure is a handler (`async |tx, message| { … }`, given to
/// [`Consumer::new`](crate::Consumer::new)). So is a type of your own that implements this
/// trait: its state lives in fields, and a consumer built with it has a type you can name, so
/// one function can build it and another spawn it (a consumer whose handler is hidden behind
/// `impl AsyncFn` cannot prove its future `Send`).
///
/// ```
/// use guestlist_consumer::{Handler, Message};
///
/// /// Records each fresh event as a pick task.
/// struct Pick {
///     table: String,
/// }
///
/// impl Handler<sqlx::Postgres> for Pick {
///     type Error = sqlx::Error;
///
///     async fn handle(&self, tx: &mut sqlx::PgConnection, message: &Message) -> Result<(), sqlx::Error> {
///         let insert = format!("INSERT INTO {} (event) VALUES ($1)", self.table);
///         sqlx::query(sqlx::AssertSqlSafe(insert))
///             .bind(message.id.as_str())
///             .execute(&mut *tx)
///             .await?;
///         Ok(())
///     }
/// }
/// ```
pub trait Handler<DB: Backend>: Send + Sync + 'static {
    /// What the handler fails with: `sqlx::Error`, `anyhow::Error`, an error enum of your own
    /// (see [`WorkError`]).
    type Error: WorkError;

    /// Handles `message` on `tx`, the transaction its claim was written on; the consumer commits
    /// it, then acknowledges. An error rolls back the claim with the handler's writes.
    fn handle(
        &self,
        tx: &mut DB::Connection,
        message: &Message,
    ) -> impl Future<Output = Result<(), Self::Error>>;

    /// Whether the messages of a batch run on one transaction: yes, but for a handler in steps
    /// ([`InSteps`](crate::InSteps)). The consumer's own: leave it be.
    #[doc(hidden)]
    fn batches(&self) -> bool {
        true
    }

    /// Runs `message` on its own, through the inbox, within `limit` for each try: on the
    /// transaction of [`Inbox::process`], but for a handler in steps. The consumer's own:
    /// leave it be (its error type is the consumer's and cannot be named).
    #[doc(hidden)]
    fn alone(
        self: Arc<Self>,
        inbox: &Inbox<DB>,
        pool: &Pool<DB>,
        name: &HandlerName,
        message: Arc<Message>,
        limit: Duration,
    ) -> impl Future<Output = Result<Stepped<()>, ProcessError<Failure>>> {
        async move {
            // The closure owns what it lends the handler, so that the run's future is `Send`.
            let id = message.id.clone();
            let processed = inbox
                .process(pool, name, &id, async move |tx| {
                    let run = message.handler_span();
                    timed(limit, self.handle(tx, &message))
                        .instrument(run)
                        .await
                })
                .await?;
            Ok(match processed {
                Processed::Ran(()) => Stepped::Ran(()),
                Processed::Duplicate => Stepped::Duplicate,
            })
        }
    }

    /// Runs `messages` side by side through the inbox, their steps journaled together
    /// ([`Inbox::process_steps_batch`](guestlist_sqlx::Inbox::process_steps_batch)), each within
    /// `limit`: what each came to, with the deferral it recorded. `None` for a handler that
    /// does not run in steps. The consumer's own: leave it be.
    #[doc(hidden)]
    fn together(
        self: Arc<Self>,
        inbox: &Inbox<DB>,
        pool: &Pool<DB>,
        name: &HandlerName,
        messages: &[Arc<Message>],
        limit: Duration,
    ) -> impl Future<Output = Option<Vec<Ran>>> {
        let _ = (inbox, pool, name, messages, limit);
        async { None }
    }
}

/// What a message's run came to, with the deferral it recorded, if it recorded one.
#[doc(hidden)]
pub(crate) type Ran = (
    Result<Stepped<()>, ProcessError<Failure>>,
    Option<guestlist_core::Deferral>,
);

impl<DB, F, E> Handler<DB> for F
where
    DB: Backend,
    F: AsyncFn(&mut DB::Connection, &Message) -> Result<(), E> + Send + Sync + 'static,
    E: WorkError,
{
    type Error = E;

    fn handle(
        &self,
        tx: &mut DB::Connection,
        message: &Message,
    ) -> impl Future<Output = Result<(), E>> {
        self(tx, message)
    }
}
