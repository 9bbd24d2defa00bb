//! What a consumer runs for each fresh message whose work is named steps (DESIGN 4d).

use std::future::Future;

use guestlist_sqlx::{Backend, Steps, WorkError};

use crate::Message;

/// A handler whose work touches several systems, as named steps that a redelivery resumes
/// after: charge the card, reserve the stock, send the email, then write the order's state.
/// Given to [`Consumer::with_steps`](crate::Consumer::with_steps), each message runs on its
/// own through [`Inbox::process_steps`](guestlist_sqlx::Inbox::process_steps): `steps` asks for
/// the steps in order ([`Steps::external`], [`Steps::database`]), outside any transaction the
/// consumer holds; `finish` then writes on the transaction that claims the message, with what
/// `steps` returned.
///
/// How its failures are treated: a step's outage or "not yet" is tried again in the process
/// ([`Inbox::step_retry`](guestlist_sqlx::Inbox::step_retry)), then the message goes back
/// uncounted where the step deferred; another run that holds the message is a "not yet"; a run
/// taken over by another is withdrawn (never poison); anything else counts against the
/// message, and its dead letter names the failed step. The journal of the finished steps stays,
/// so a retry of the dead letter resumes after them.
///
/// ```
/// use guestlist_consumer::{Message, StepHandler};
/// use guestlist_sqlx::Steps;
///
/// /// Charges the order, reserves its stock, then marks it paid.
/// struct Warehouse;
///
/// impl StepHandler<sqlx::Postgres> for Warehouse {
///     type Error = anyhow::Error;
///     type Done = String;
///
///     async fn steps(
///         &self,
///         steps: &mut Steps<sqlx::Postgres>,
///         message: &Message,
///     ) -> anyhow::Result<String> {
///         // The payments service gets `warehouse:<id>/charge` as its Idempotency-Key.
///         let charge: String = steps
///             .external("charge", || async { anyhow::Ok(format!("ch_{}", message.id)) })
///             .await?;
///         steps
///             .database("reserve", async |tx| {
///                 sqlx::query("UPDATE stock SET held = held + 1 WHERE sku = 'mug'")
///                     .execute(&mut *tx)
///                     .await
///                     .map(drop)
///             })
///             .await?;
///         Ok(charge)
///     }
///
///     async fn finish(
///         &self,
///         tx: &mut sqlx::PgConnection,
///         message: &Message,
///         charge: String,
///     ) -> anyhow::Result<()> {
///         sqlx::query("UPDATE orders SET charge = $1 WHERE event = $2")
///             .bind(charge)
///             .bind(message.id.as_str())
///             .execute(&mut *tx)
///             .await?;
///         Ok(())
///     }
/// }
/// ```
pub trait StepHandler<DB: Backend>: Send + Sync + 'static {
    /// What the steps and the final work fail with (see [`WorkError`]); a step's
    /// [`StepError`](guestlist_sqlx::StepError) converts into `anyhow::Error` with `?`.
    type Error: WorkError;
    /// What the steps hand to [`finish`](Self::finish): the results it needs.
    type Done: Send;

    /// Runs the message's steps, in order; those an earlier run journaled return their result
    /// without running.
    fn steps(
        &self,
        steps: &mut Steps<DB>,
        message: &Message,
    ) -> impl Future<Output = Result<Self::Done, Self::Error>>;

    /// The final writes, on the transaction that claims the message: they commit with the
    /// claim, and the message's journal goes with them.
    fn finish(
        &self,
        tx: &mut DB::Connection,
        message: &Message,
        done: Self::Done,
    ) -> impl Future<Output = Result<(), Self::Error>>;
}
