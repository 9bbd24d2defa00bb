//! Steps (DESIGN 4d), whoever runs them: a message's handler through the inbox, or a request
//! behind the HTTP layer through its key. Each named step's result is journaled in a steps table
//! (`<inbox>_steps`, `<keys>_steps`): an external step once its call returns, a database step on
//! the transaction of its own writes. One run at a time holds the journal by a fencing token in
//! its run row (place 0); a stale run can neither journal nor commit.

use std::sync::Arc;
use std::time::Duration;

use guestlist_core::protocol::{KeyRowView, Settlement, settle};

use crate::Error;
use crate::backend::Backend;
use crate::backend::statement::Plain;
use crate::backend::steps::{JournalRow, RunRow, StepsSql};
use crate::fencing::new_token;

pub(crate) mod group;
pub(crate) mod pending;
mod retry;
mod run;

pub use run::{StepError, Steps};

/// The lease of a run of a message's steps unless
/// [`Inbox::step_lease`](crate::Inbox::step_lease) sets another; a request's steps journal
/// under it too (their key's lease keeps their attempts apart).
pub(crate) const DEFAULT_STEP_LEASE: Duration = Duration::from_secs(30);

/// How long a step that meets an outage or a "not yet" is tried again in the process unless
/// [`Inbox::step_retry`](crate::Inbox::step_retry) sets another.
pub(crate) const DEFAULT_STEP_RETRY: Duration = Duration::from_secs(10);

/// The most bytes a step's result takes in the journal, serialized as JSON.
pub const MAX_STEP_RESULT: usize = 64 * 1024;

/// Whose steps a run runs: the journal's two columns (a handler and a message id, or a scope and
/// a key as stored), what errors call them, and the parent of the keys its external steps carry.
#[derive(Debug)]
pub(crate) struct RunOf {
    /// The journal's first column: the handler, or the key's scope.
    pub(crate) owner: String,
    /// The journal's second column: the message id, or the key as stored.
    pub(crate) id: String,
    /// The keys carried downstream are `parent/<step>`.
    pub(crate) parent: Arc<str>,
}

impl RunOf {
    /// The run of `handler`'s steps for message `id`, carrying `handler:id`.
    pub(crate) fn message(
        handler: &guestlist_core::HandlerName,
        id: &guestlist_core::MessageId,
    ) -> Arc<Self> {
        Arc::new(Self {
            owner: handler.as_str().to_owned(),
            id: id.as_str().to_owned(),
            parent: Arc::from(format!("{handler}:{id}")),
        })
    }

    /// The columns `(owner, id)`, for binding.
    pub(crate) fn columns(&self) -> (&str, &str) {
        (self.owner.as_str(), self.id.as_str())
    }
}

/// How a claim of a run ended.
pub(crate) enum Run {
    /// This run holds the journal under `token`.
    Holds(i64),
    /// Another run holds it, for this long yet.
    Held(Duration),
}

/// Claims the run of `of`'s steps for a lease of `lease_ms`: a new run row, or the take-over of
/// one whose lease ended (a message's runs, which nothing else keeps apart).
pub(crate) async fn claim_run<DB: Backend>(
    conn: &mut DB::Connection,
    sql: &StepsSql,
    of: &RunOf,
    lease_ms: i64,
) -> Result<Run, Error> {
    let (owner, id) = of.columns();
    let token = new_token()? as i64;
    let claim = Plain::new(
        |sql: &StepsSql| &sql.claim,
        (owner, id, "", token, lease_ms),
    );
    if DB::inserted(DB::run(conn, sql, claim).await)? {
        return Ok(Run::Holds(token));
    }
    let run = Plain::reading(|sql: &StepsSql| &sql.run, (owner, id));
    let Some(row): Option<RunRow> = DB::fetch_first(conn, sql, run).await? else {
        // Forgotten between the insert and the read: the final commit landed just now.
        return Ok(Run::Held(Duration::from_secs(1)));
    };
    let view = KeyRowView {
        same_request: true,
        answered: false,
        lease_left_ms: row.lease_left_ms,
    };
    match settle(view, Some(())) {
        Settlement::TakeOver(()) => {
            let take = Plain::new(
                |sql: &StepsSql| &sql.take_over,
                (token, lease_ms, owner, id, row.token),
            );
            if DB::run(conn, sql, take).await? == 1 {
                tracing::info!(
                    handler = owner,
                    message_id = id,
                    "a run's lease ended; taking its steps over"
                );
                Ok(Run::Holds(token))
            } else {
                Ok(Run::Held(Duration::from_secs(1)))
            }
        }
        Settlement::InFlight { retry_after_ms } => {
            Ok(Run::Held(Duration::from_millis(retry_after_ms)))
        }
        Settlement::Replay | Settlement::Mismatch => Ok(Run::Held(Duration::from_secs(1))),
    }
}

/// Seats an attempt that holds something else already (a key's lease) as the run of `of`'s
/// steps under that attempt's `token`: a new run row marked `mark`, or the run row of an earlier
/// attempt with the same mark, whose token it replaces (so that the earlier attempt, if it still
/// runs, journals nothing more). `false` where the run row bears another mark: the journal is
/// another request's.
pub(crate) async fn seat_run<DB: Backend>(
    conn: &mut DB::Connection,
    sql: &StepsSql,
    of: &RunOf,
    mark: &str,
    token: i64,
    lease_ms: i64,
) -> Result<bool, Error> {
    let (owner, id) = of.columns();
    let claim = Plain::new(
        |sql: &StepsSql| &sql.claim,
        (owner, id, mark, token, lease_ms),
    );
    if DB::inserted(DB::run(conn, sql, claim).await)? {
        return Ok(true);
    }
    let seat = Plain::new(
        |sql: &StepsSql| &sql.adopt,
        (token, lease_ms, owner, id, mark),
    );
    Ok(DB::run(conn, sql, seat).await? == 1)
}

/// The journal of `of`'s finished steps, in order; `None` where its owner is handled already
/// (the inbox holds the message, the key has its answer).
pub(crate) async fn read_journal<DB: Backend>(
    conn: &mut DB::Connection,
    sql: &StepsSql,
    of: &RunOf,
) -> Result<Option<Vec<JournalRow>>, Error> {
    let (owner, id) = of.columns();
    let journal = Plain::reading(|sql: &StepsSql| &sql.journal, (owner, id, owner, id));
    let mut journal: Vec<JournalRow> = DB::fetch(conn, sql, journal).await?;
    if journal.first().is_some_and(|row| row.place < 0) {
        return Ok(None);
    }
    journal.retain(|row| row.place > 0);
    Ok(Some(journal))
}

/// Ends the lease of the run holding `of`'s journal under `token` (none, where another holds it).
pub(crate) async fn end_lease<DB: Backend>(
    conn: &mut DB::Connection,
    sql: &StepsSql,
    of: &RunOf,
    token: i64,
) -> Result<(), Error> {
    let (owner, id) = of.columns();
    let end = Plain::new(|sql: &StepsSql| &sql.renew, (0_i64, owner, id, token));
    DB::run(conn, sql, end).await?;
    Ok(())
}

/// Forgets `of`'s run and journal.
pub(crate) async fn forget<DB: Backend>(
    conn: &mut DB::Connection,
    sql: &StepsSql,
    of: &RunOf,
) -> Result<(), Error> {
    let forget = Plain::new(|sql: &StepsSql| &sql.forget, of.columns());
    DB::run(conn, sql, forget).await?;
    Ok(())
}

/// Ends the lease of a run whose work failed, so that the next try resumes at once instead of
/// waiting it out. Best effort: a lease left runs out by itself.
pub(crate) async fn give_back<DB: Backend>(steps: &Steps<DB>) {
    let Ok(mut conn) = steps.pool.acquire().await else {
        return;
    };
    let ended = end_lease::<DB>(&mut conn, &steps.sql, &steps.run, steps.token).await;
    if let Err(err) = ended {
        tracing::debug!(error = %err, "cannot give a failed run's lease back; it runs out by itself");
    }
}
