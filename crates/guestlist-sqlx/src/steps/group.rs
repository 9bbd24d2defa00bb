//! A batch's runs journaled together: the runs of a batch's messages go side by side, and what
//! each writes (its run's claim, a step's journal row, a database step's writes, the final
//! work) goes on one shared transaction, the handler's own code inside a savepoint of its own.
//! The guards and journal rows of the runs are gathered and written just before the commit, all
//! at once ([`super::pending`]). The transaction commits once every run still going waits for
//! it (or after a short wait, so that a slow call holds nobody back for long): one commit per
//! step of the batch instead of one per step of each message. A run goes on only once its part
//! committed, so a step is journaled before the next one runs, as on its own.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use sqlx::{Pool, Transaction};
use tokio::sync::watch;

use super::RunOf;
use super::pending::{self, Pending, Refused};
use crate::Error;
use crate::backend::Backend;
use crate::backend::InboxSql;
use crate::backend::steps::StepsSql;

/// How long a run that waits for its part's commit lets the others catch up before it commits
/// itself.
const CATCH_UP: Duration = Duration::from_millis(5);

/// The shared transaction of a batch's runs, and who waits for it.
pub(crate) struct Group<DB: Backend> {
    pool: Pool<DB>,
    sql: Arc<StepsSql>,
    /// The inbox a final part's claim goes in.
    inbox: Arc<InboxSql>,
    shared: Arc<tokio::sync::Mutex<Shared<DB>>>,
    counts: Mutex<Counts>,
    /// The last generation whose commit ended.
    committed: watch::Sender<u64>,
    /// The generations whose commit failed, with the error and the runs refused.
    failed: Mutex<Vec<Failed>>,
}

/// A generation whose commit failed.
struct Failed {
    generation: u64,
    error: Arc<Error>,
    /// The runs refused: those whose guard failed are told [`Error::RunTakenOver`], those whose
    /// claim found their message handled that it was, and the others `error`.
    refused: Refused,
}

/// The open transaction and its generation (how many went before it).
struct Shared<DB: Backend> {
    tx: Option<Transaction<'static, DB>>,
    generation: u64,
    /// What the runs write just before it commits.
    pending: Vec<Pending>,
    /// A kept part's savepoint is still open: the next one releases it.
    kept_savepoint: bool,
    /// A part was dropped before it was kept or undone (its run's future cancelled: a
    /// timeout): what it wrote is on the transaction without its journal row, so the
    /// transaction must not commit.
    poisoned: bool,
}

/// The runs still going, and those of them waiting for a commit.
struct Counts {
    active: usize,
    waiting: usize,
}

impl<DB: Backend> Group<DB> {
    /// A group of `runs` runs on `pool`, journaling in `sql`'s table.
    pub(crate) fn new(
        pool: Pool<DB>,
        sql: Arc<StepsSql>,
        inbox: Arc<InboxSql>,
        runs: usize,
    ) -> Arc<Self> {
        Arc::new(Self {
            pool,
            sql,
            inbox,
            shared: Arc::new(tokio::sync::Mutex::new(Shared {
                tx: None,
                generation: 1,
                pending: Vec::new(),
                kept_savepoint: false,
                poisoned: false,
            })),
            counts: Mutex::new(Counts {
                active: runs,
                waiting: 0,
            }),
            committed: watch::channel(0).0,
            failed: Mutex::new(Vec::new()),
        })
    }

    /// Enters the shared transaction for a run's part, begun now if none is open. With
    /// `isolated` (a part that runs the handler's own code), the part runs inside a savepoint,
    /// and [`Part::undo`] rolls back to it. Without (the group's own statements, which fail only
    /// when the database does), undoing rolls the whole transaction back and fails every part
    /// on it: cheaper by two round trips for the common case.
    ///
    /// A part is a guard, not a closure taking one: the handler's closures run inside it, and
    /// an async closure called inside another loses its `Send` (a rustc limitation).
    pub(crate) async fn enter(self: &Arc<Self>, isolated: bool) -> Result<Part<DB>, Error> {
        let mut shared = Arc::clone(&self.shared).lock_owned().await;
        if shared.tx.is_none() {
            shared.tx = Some(DB::begin(&self.pool).await?);
        }
        let mut part = Part {
            group: Arc::clone(self),
            shared,
            isolated,
            ended: false,
            journaled: None,
        };
        if isolated {
            // The last kept part's savepoint is released on the same round trip: savepoints
            // left to nest would make each a child of the one before, and PostgreSQL's other
            // sessions walk such chains to tell whose rows they see.
            let sql = if std::mem::replace(&mut part.shared.kept_savepoint, true) {
                "RELEASE SAVEPOINT guestlist_run; SAVEPOINT guestlist_run"
            } else {
                "SAVEPOINT guestlist_run"
            };
            savepoint::<DB>(part.conn(), sql).await?;
        }
        Ok(part)
    }

    /// A run is done (or gave up): the others need not wait for it.
    pub(crate) async fn leave(&self) {
        let all_wait = {
            let mut counts = self.counts.lock().unwrap_or_else(|e| e.into_inner());
            counts.active -= 1;
            counts.waiting > 0 && counts.waiting >= counts.active
        };
        if all_wait {
            self.commit().await;
        }
    }

    /// Waits until generation `generation` committed: commits it itself once every run still
    /// going waits, or once it waited [`CATCH_UP`]. `run` is the run whose writes are pending,
    /// told apart where its guard failed; `false` where its claim found the message handled.
    async fn wait(&self, generation: u64, run: Option<&RunOf>) -> Result<bool, Error> {
        let all_wait = {
            let mut counts = self.counts.lock().unwrap_or_else(|e| e.into_inner());
            counts.waiting += 1;
            counts.waiting >= counts.active
        };
        if all_wait {
            self.commit().await;
        }
        let mut committed = self.committed.subscribe();
        loop {
            if *committed.borrow_and_update() >= generation {
                self.counts
                    .lock()
                    .unwrap_or_else(|e| e.into_inner())
                    .waiting -= 1;
                let failed = self.failed.lock().unwrap_or_else(|e| e.into_inner());
                let Some(failed) = failed.iter().find(|f| f.generation == generation) else {
                    return Ok(true);
                };
                let among = |runs: &[Arc<RunOf>], run: &RunOf| {
                    runs.iter().any(|r| r.columns() == run.columns())
                };
                return match run {
                    Some(run) if among(&failed.refused.taken, run) => Err(Error::RunTakenOver {
                        handler: run.owner.clone(),
                        message_id: run.id.clone(),
                    }),
                    Some(run) if among(&failed.refused.handled, run) => Ok(false),
                    _ => Err(Error::Shared(Arc::clone(&failed.error))),
                };
            }
            if tokio::time::timeout(CATCH_UP, committed.changed())
                .await
                .is_err()
            {
                self.commit().await;
            }
        }
    }

    /// Commits the open transaction, if there is one, and tells its waiters how it went.
    async fn commit(&self) {
        let mut shared = self.shared.lock().await;
        self.end(&mut shared, None).await;
    }

    /// Ends the open transaction, if there is one: commits it, or rolls it back where `failed`
    /// says why; then tells its waiters.
    async fn end(&self, shared: &mut Shared<DB>, failed: Option<Error>) {
        let Some(mut tx) = shared.tx.take() else {
            return;
        };
        shared.kept_savepoint = false;
        let failed = match (failed, std::mem::take(&mut shared.poisoned)) {
            (None, true) => Some(Error::RolledBackWithBatch),
            (failed, _) => failed,
        };
        let pending = std::mem::take(&mut shared.pending);
        let mut told = Told {
            group: self,
            generation: shared.generation,
            error: Some(Error::RolledBackWithBatch),
            refused: Refused::default(),
        };
        shared.generation += 1;
        let failed = match failed {
            None => match pending::write::<DB>(&mut tx, &self.sql, &self.inbox, &pending).await {
                Ok(refused) if refused.is_empty() => None,
                Ok(refused) => {
                    told.refused = refused;
                    Some(Error::RolledBackWithBatch)
                }
                Err(err) => Some(err),
            },
            failed => failed,
        };
        told.error = match failed {
            None => tx.commit().await.map_err(Error::from_commit).err(),
            Some(err) => {
                let _ = tx.rollback().await;
                Some(err)
            }
        };
    }
}

/// Tells the waiters of a generation how its end went, when dropped: also where the end was
/// cut off (the future running it cancelled mid-commit), as a failure, so that nobody waits for
/// a generation that will never be told.
struct Told<'g, DB: Backend> {
    group: &'g Group<DB>,
    generation: u64,
    error: Option<Error>,
    refused: Refused,
}

impl<DB: Backend> Drop for Told<'_, DB> {
    fn drop(&mut self) {
        if let Some(err) = self.error.take() {
            let failed = &mut self.group.failed.lock().unwrap_or_else(|e| e.into_inner());
            failed.push(Failed {
                generation: self.generation,
                error: Arc::new(err),
                refused: std::mem::take(&mut self.refused),
            });
        }
        self.group.committed.send_replace(self.generation);
    }
}

/// A run's part of the shared transaction, from [`Group::enter`] until it is
/// [kept](Part::keep) or [undone](Part::undo).
pub(crate) struct Part<DB: Backend> {
    group: Arc<Group<DB>>,
    shared: tokio::sync::OwnedMutexGuard<Shared<DB>>,
    isolated: bool,
    /// Kept or undone: dropped otherwise, it poisons the shared transaction.
    ended: bool,
    /// The run whose writes the part left pending for the commit.
    journaled: Option<Arc<RunOf>>,
}

impl<DB: Backend> Drop for Part<DB> {
    fn drop(&mut self) {
        if !self.ended {
            self.shared.poisoned = true;
        }
    }
}

impl<DB: Backend> Part<DB> {
    /// The shared transaction.
    pub(crate) fn conn(&mut self) -> &mut DB::Connection {
        self.shared.tx.as_mut().expect("open while a part is in it")
    }

    /// Leaves `pending` (the run's guard, its step's journal row, its forgetting) to be
    /// written just before the shared transaction commits: if the guard fails there (another
    /// run took the message over), nothing of the transaction commits.
    pub(crate) fn journal(&mut self, pending: Pending) {
        self.journaled = Some(Arc::clone(&pending.run));
        self.shared.pending.push(pending);
    }

    /// Keeps the part and waits for the shared transaction's commit. An isolated part's
    /// savepoint is released with the next part's, or by the commit: a round trip saved.
    pub(crate) async fn keep(self) -> Result<(), Error> {
        self.keep_claimed().await.map(drop)
    }

    /// Keeps a part whose pending writes claim its message, and waits for the shared
    /// transaction's commit: `false` where the claim found the message handled (by something
    /// other than a run of steps), and the transaction rolled back.
    pub(crate) async fn keep_claimed(mut self) -> Result<bool, Error> {
        let generation = self.shared.generation;
        let group = Arc::clone(&self.group);
        let journaled = self.journaled.take();
        self.ended = true;
        drop(self);
        group.wait(generation, journaled.as_deref()).await
    }

    /// Undoes the part, which failed: back to its savepoint, or (not isolated) the whole shared
    /// transaction, whose other parts then fail with [`Error::RolledBackWithBatch`].
    pub(crate) async fn undo(mut self) {
        if self.isolated {
            let back = savepoint::<DB>(self.conn(), "ROLLBACK TO SAVEPOINT guestlist_run").await;
            let released = match back {
                Ok(()) => savepoint::<DB>(self.conn(), "RELEASE SAVEPOINT guestlist_run").await,
                Err(err) => Err(err),
            };
            if released.is_ok() {
                self.shared.kept_savepoint = false;
                self.ended = true;
                return;
            }
        }
        self.ended = true;
        let group = Arc::clone(&self.group);
        group
            .end(&mut self.shared, Some(Error::RolledBackWithBatch))
            .await;
    }
}

/// Runs a savepoint statement on the shared transaction.
async fn savepoint<DB: Backend>(tx: &mut DB::Connection, sql: &'static str) -> Result<(), Error> {
    sqlx::raw_sql(sqlx::AssertSqlSafe(sql))
        .execute(DB::executor(tx))
        .await?;
    Ok(())
}
