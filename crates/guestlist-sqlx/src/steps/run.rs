//! A run of one message's steps as the work sees it: each step asked for, replayed from the
//! journal or run and journaled, under the run's fencing token.

use std::future::Future;
use std::sync::Arc;

use guestlist_core::protocol::{StepAt, step_at};
use serde::Serialize;
use serde::de::DeserializeOwned;
use sqlx::Pool;
use tracing::{Instrument, Span};

use super::group::Group;
use super::pending::Pending;
use super::retry::{After, Retry};
use super::{MAX_STEP_RESULT, RunOf};
use crate::backend::Backend;
use crate::backend::statement::Plain;
use crate::backend::steps::{GuardedRecord, JournalRow, Record, StepsSql};
use crate::{Error, WorkError};

/// Why a step did not return its result.
#[derive(Debug, thiserror::Error)]
pub enum StepError<X> {
    /// The step's own work failed; nothing of it was journaled.
    #[error("step {step:?} failed: {error}")]
    Step {
        /// The step.
        step: String,
        /// Its error.
        error: X,
    },
    /// The journal could not be read or written, or the handler's steps changed, or another
    /// run took the message over ([`Error::StepChanged`], [`Error::RunTakenOver`]).
    #[error("the steps' journal")]
    Store(#[from] Error),
}

impl<X> From<sqlx::Error> for StepError<X> {
    fn from(err: sqlx::Error) -> Self {
        StepError::Store(Error::Database(err))
    }
}

/// A run of one message's steps, handed to the work of
/// [`Inbox::process_steps`](crate::Inbox::process_steps) (or of one request's, behind the HTTP
/// layer): each step the work asks for, in order, is replayed from the journal where an earlier
/// run finished it, and run (then journaled) where not.
pub struct Steps<DB: Backend> {
    pub(crate) pool: Pool<DB>,
    pub(crate) sql: Arc<StepsSql>,
    pub(crate) run: Arc<RunOf>,
    pub(crate) token: i64,
    pub(crate) lease_ms: i64,
    pub(crate) retry_for: std::time::Duration,
    pub(crate) journal: Vec<JournalRow>,
    pub(crate) place: usize,
    /// The batch whose runs journal together, where this run is one of them.
    pub(crate) group: Option<Arc<Group<DB>>>,
}

impl<DB: Backend> std::fmt::Debug for Steps<DB> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Steps")
            .field("of", &self.run.parent)
            .field("place", &self.place)
            .field("journaled", &self.journal.len())
            .finish()
    }
}

impl<DB: Backend> Steps<DB> {
    /// An external step: `call` runs outside any open transaction, with the message's key
    /// carried (`handler:id/name`: `guestlist_carry::CarryKey` sets it on a request made
    /// inside, and `guestlist_carry::key_for(name)` gives it), and its result is
    /// journaled once it returns. Journaled by an earlier run, it returns that result and does
    /// not run. Cut mid-call (a crash before the journal), it runs again with the same key: at
    /// least once for the call, exactly once where the downstream keeps keys. A call that
    /// meets an outage or a "not yet" is tried again, up to [`Inbox::step_retry`](crate::Inbox::step_retry).
    pub async fn external<R, X, C>(
        &mut self,
        name: &str,
        mut call: impl FnMut() -> C,
    ) -> Result<R, StepError<X>>
    where
        C: Future<Output = Result<R, X>>,
        R: Serialize + DeserializeOwned,
        X: WorkError,
    {
        let span = step_span(name, "external");
        if let Some(result) = self.replayed(name, &span)? {
            return Ok(result);
        }
        let mut retry = Retry::new(self.retry_for, &span);
        let result = loop {
            retry.begin();
            let call = guestlist_carry::scope_step(name, call());
            let call = guestlist_carry::scope(Arc::clone(&self.run.parent), call);
            let (result, deferred) =
                guestlist_core::watch_deferral(call.instrument(span.clone())).await;
            let err = match result {
                Ok(result) => break Ok(result),
                Err(error) => StepError::Step {
                    step: name.to_owned(),
                    error,
                },
            };
            match retry.after(err, deferred) {
                After::Again(pause) => tokio::time::sleep(pause).await,
                After::GiveUp(err) => break Err(err),
            }
        };
        let result = outcome(&span, result)?;
        let bytes = encode(name, &result)?;
        self.journal_external(name, &bytes).await?;
        self.advance(name, bytes);
        Ok(result)
    }

    /// Journals external step `name`'s result under the run's guard: one statement where the
    /// database writes both at once, else a transaction of the guard and the journal row.
    async fn journal_external(&self, name: &str, result: &[u8]) -> Result<(), Error> {
        if let Some(group) = &self.group {
            // Written with the batch's other runs' just before the shared commit.
            let mut part = group.enter(false).await?;
            part.journal(self.pending(Some((name, result))));
            return part.keep().await;
        }
        if self.sql.record_guarded.is_some() {
            let mut conn = self.pool.acquire().await?;
            return self.journal_guarded(&mut conn, name, result).await;
        }
        let mut tx = DB::begin(&self.pool).await?;
        self.journal_guarded(&mut tx, name, result).await?;
        tx.commit().await.map_err(Error::from_commit)
    }

    /// Journals step `name` at this place with `result` on `conn`, with the guard that renews
    /// the run's lease by its token (and locks the run row, so that no take-over lands before
    /// the transaction ends): one statement where the database writes both at once.
    /// [`Error::RunTakenOver`] where another run holds the message now.
    async fn journal_guarded(
        &self,
        conn: &mut DB::Connection,
        name: &str,
        result: &[u8],
    ) -> Result<(), Error> {
        if self.sql.record_guarded.is_none() {
            self.guard(conn).await?;
            return self.record(conn, name, result).await;
        }
        let record = GuardedRecord {
            lease_ms: self.lease_ms,
            record: self.entry(name, result),
        };
        if DB::run(conn, &*self.sql, record).await? == 1 {
            Ok(())
        } else {
            Err(self.taken_over())
        }
    }

    /// A database step: `work` runs on a transaction of its own, and its writes and the step's
    /// journal row commit together, so it runs exactly once. Journaled by an earlier run, it
    /// returns that result and does not run. A failure rolls its writes back and is returned
    /// at once (an outage, a deadlock or a "not yet" included): the message's next run resumes
    /// at this step.
    pub async fn database<R, X>(
        &mut self,
        name: &str,
        work: impl AsyncFnOnce(&mut DB::Connection) -> Result<R, X>,
    ) -> Result<R, StepError<X>>
    where
        R: Serialize + DeserializeOwned,
        X: WorkError,
    {
        let span = step_span(name, "database");
        if let Some(result) = self.replayed(name, &span)? {
            return Ok(result);
        }
        span.record("attempts", 1);
        let this = &*self;
        if let Some(group) = &self.group {
            let group = Arc::clone(group);
            let tried = this.database_in(&group, name.to_owned(), work);
            let (result, bytes) = outcome(&span, tried.instrument(span.clone()).await)?;
            self.advance(name, bytes);
            return Ok(result);
        }
        let tried = async move {
            let mut tx = DB::begin(&this.pool).await?;
            let result = work(&mut tx).await.map_err(|error| StepError::Step {
                step: name.to_owned(),
                error,
            })?;
            let bytes = encode(name, &result)?;
            // The guard goes with the journal row, after the work: a take-over meanwhile fails
            // it, and nothing of the step commits; one landing after it waits for the commit.
            this.journal_guarded(&mut tx, name, &bytes).await?;
            tx.commit().await.map_err(Error::from_commit)?;
            Ok((result, bytes))
        };
        let (result, bytes) = outcome(&span, tried.instrument(span.clone()).await)?;
        self.advance(name, bytes);
        Ok(result)
    }

    /// Database step `name` on the batch's shared transaction, in a part of its own: its writes
    /// and its journal row commit with the batch's.
    async fn database_in<R, X>(
        &self,
        group: &Arc<Group<DB>>,
        name: String,
        work: impl AsyncFnOnce(&mut DB::Connection) -> Result<R, X>,
    ) -> Result<(R, Vec<u8>), StepError<X>>
    where
        R: Serialize,
    {
        let mut part = group.enter(true).await?;
        // The guard goes with the journal row, just before the shared commit: a take-over
        // meanwhile fails it, and nothing of the transaction commits.
        let result = match work(part.conn()).await {
            Ok(result) => result,
            Err(error) => {
                part.undo().await;
                return Err(StepError::Step { step: name, error });
            }
        };
        match encode(&name, &result) {
            Ok(bytes) => {
                part.journal(self.pending(Some((&name, &bytes))));
                part.keep().await?;
                Ok((result, bytes))
            }
            Err(err) => {
                part.undo().await;
                Err(err.into())
            }
        }
    }

    /// The run's writes for a batch's shared commit: its guard (the lease renewed) and
    /// `step`'s journal row at this place.
    pub(crate) fn pending(&self, step: Option<(&str, &[u8])>) -> Pending {
        Pending {
            run: Arc::clone(&self.run),
            token: self.token,
            lease_ms: self.lease_ms,
            step: step
                .map(|(name, result)| (self.place as i64 + 1, name.to_owned(), result.to_vec())),
            forget: false,
            claim: false,
        }
    }

    /// The run without its journal: what the final commit needs to guard it, and to give its
    /// lease back.
    pub(crate) fn fence(&self) -> Self {
        Self {
            pool: self.pool.clone(),
            sql: Arc::clone(&self.sql),
            run: Arc::clone(&self.run),
            group: self.group.clone(),
            journal: Vec::new(),
            ..*self
        }
    }

    /// The journaled result of step `name` at this place, if an earlier run finished it.
    fn replayed<R: DeserializeOwned>(
        &mut self,
        name: &str,
        span: &Span,
    ) -> Result<Option<R>, Error> {
        let names: Vec<&str> = self.journal.iter().map(|row| row.name.as_str()).collect();
        match step_at(&names, self.place, name) {
            StepAt::Run => Ok(None),
            StepAt::Changed { journaled } => Err(Error::StepChanged {
                handler: self.run.owner.clone(),
                message_id: self.run.id.clone(),
                place: self.place,
                journaled: journaled.to_owned(),
                asked: name.to_owned(),
            }),
            StepAt::Replay => {
                let bytes = self.journal[self.place]
                    .result
                    .as_deref()
                    .unwrap_or(b"null");
                let result = serde_json::from_slice(bytes).map_err(|err| Error::StepResult {
                    step: name.to_owned(),
                    reason: format!("cannot be read as the type asked for now: {err}"),
                })?;
                self.place += 1;
                span.record("replayed", true);
                span.record("outcome", "replayed");
                Ok(Some(result))
            }
        }
    }

    /// Renews the run's lease by its token on `conn`: [`Error::RunTakenOver`] where another run
    /// holds the message now.
    async fn guard(&self, conn: &mut DB::Connection) -> Result<(), Error> {
        let (owner, id) = self.run.columns();
        let renew = Plain::new(
            |sql: &StepsSql| &sql.renew,
            (self.lease_ms, owner, id, self.token),
        );
        if DB::run(conn, &*self.sql, renew).await? == 1 {
            Ok(())
        } else {
            Err(self.taken_over())
        }
    }

    /// What a stale run is told at its next journal or commit.
    pub(crate) fn taken_over(&self) -> Error {
        Error::RunTakenOver {
            handler: self.run.owner.clone(),
            message_id: self.run.id.clone(),
        }
    }

    /// Journals step `name` at this place with `result`.
    async fn record(
        &self,
        conn: &mut DB::Connection,
        name: &str,
        result: &[u8],
    ) -> Result<(), Error> {
        DB::run(conn, &*self.sql, self.entry(name, result)).await?;
        Ok(())
    }

    /// Step `name`'s journal row at this place, with `result`.
    fn entry<'a>(&'a self, name: &'a str, result: &'a [u8]) -> Record<'a> {
        Record {
            handler: self.run.owner.as_str(),
            id: self.run.id.as_str(),
            place: self.place as i64 + 1,
            name,
            token: self.token,
            result,
        }
    }

    /// The step just journaled, as the journal now holds it.
    fn advance(&mut self, name: &str, result: Vec<u8>) {
        self.journal.push(JournalRow {
            place: self.place as i64 + 1,
            name: name.to_owned(),
            result: Some(result),
        });
        self.place += 1;
    }
}

/// The span of one step: `guestlist.step`, with its name and kind, whether it was replayed
/// from the journal, how many tries it took, and how it ended.
fn step_span(name: &str, kind: &'static str) -> Span {
    tracing::info_span!(
        "guestlist.step",
        step = name,
        kind,
        replayed = false,
        attempts = tracing::field::Empty,
        outcome = tracing::field::Empty,
    )
}

/// Records how a step's run ended on its span, and hands the result on.
fn outcome<R, X>(span: &Span, result: Result<R, StepError<X>>) -> Result<R, StepError<X>> {
    span.record(
        "outcome",
        match &result {
            Ok(_) => "journaled",
            Err(StepError::Step { .. }) => "failed",
            Err(StepError::Store(_)) => "store failed",
        },
    );
    result
}

/// `result` as the journal keeps it: JSON, at most [`MAX_STEP_RESULT`] bytes.
fn encode<R: Serialize>(step: &str, result: &R) -> Result<Vec<u8>, Error> {
    let bytes = serde_json::to_vec(result).map_err(|err| Error::StepResult {
        step: step.to_owned(),
        reason: format!("cannot be journaled: {err}"),
    })?;
    if bytes.len() > MAX_STEP_RESULT {
        return Err(Error::StepResultTooLarge {
            step: step.to_owned(),
            bytes: bytes.len(),
            limit: MAX_STEP_RESULT,
        });
    }
    Ok(bytes)
}
