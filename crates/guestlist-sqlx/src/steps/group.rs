//! A batch's runs journaled together: the runs of a batch's messages go side by side, and what
//! each writes (its run's claim, a step's journal row, a database step's writes, the final
//! work) goes on one shared transaction, each run's part inside a savepoint of its own. The
//! transaction commits once every run still going waits for it (or after a short wait, so that
//! a slow call holds nobody back for long): one commit per step of the batch instead of one per
//! step of each message. A run goes on only once its part committed, so a step is journaled
//! before the next one runs, as on its own.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use sqlx::{Pool, Transaction};
use tokio::sync::watch;

use crate::Error;
use crate::backend::Backend;

/// How long a run that waits for its part's commit lets the others catch up before it commits
/// itself.
const CATCH_UP: Duration = Duration::from_millis(5);

/// The shared transaction of a batch's runs, and who waits for it.
pub(crate) struct Group<DB: Backend> {
    pool: Pool<DB>,
    shared: Arc<tokio::sync::Mutex<Shared<DB>>>,
    counts: Mutex<Counts>,
    /// The last generation whose commit ended.
    committed: watch::Sender<u64>,
    /// The generations whose commit failed, with the error.
    failed: Mutex<Vec<(u64, Arc<Error>)>>,
}

/// The open transaction and its generation (how many went before it).
struct Shared<DB: Backend> {
    tx: Option<Transaction<'static, DB>>,
    generation: u64,
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
    /// A group of `runs` runs on `pool`.
    pub(crate) fn new(pool: Pool<DB>, runs: usize) -> Arc<Self> {
        Arc::new(Self {
            pool,
            shared: Arc::new(tokio::sync::Mutex::new(Shared {
                tx: None,
                generation: 1,
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
        };
        if isolated {
            savepoint::<DB>(part.conn(), "SAVEPOINT guestlist_run").await?;
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
    /// going waits, or once it waited [`CATCH_UP`].
    async fn wait(&self, generation: u64) -> Result<(), Error> {
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
                return match failed.iter().find(|(g, _)| *g == generation) {
                    Some((_, err)) => Err(Error::Shared(Arc::clone(err))),
                    None => Ok(()),
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
        let Some(tx) = shared.tx.take() else {
            return;
        };
        let failed = match (failed, std::mem::take(&mut shared.poisoned)) {
            (None, true) => Some(Error::RolledBackWithBatch),
            (failed, _) => failed,
        };
        let mut told = Told {
            group: self,
            generation: shared.generation,
            error: Some(Error::RolledBackWithBatch),
        };
        shared.generation += 1;
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
}

impl<DB: Backend> Drop for Told<'_, DB> {
    fn drop(&mut self) {
        if let Some(err) = self.error.take() {
            let failed = &mut self.group.failed.lock().unwrap_or_else(|e| e.into_inner());
            failed.push((self.generation, Arc::new(err)));
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
    /// Kept, undone or abandoned: dropped otherwise, it poisons the shared transaction.
    ended: bool,
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

    /// Keeps the part and waits for the shared transaction's commit.
    pub(crate) async fn keep(mut self) -> Result<(), Error> {
        if self.isolated {
            savepoint::<DB>(self.conn(), "RELEASE SAVEPOINT guestlist_run").await?;
        }
        let generation = self.shared.generation;
        let group = Arc::clone(&self.group);
        self.ended = true;
        drop(self);
        group.wait(generation).await
    }

    /// Leaves a part that wrote nothing (not isolated: no savepoint to release), without
    /// waiting for the commit.
    pub(crate) fn abandon(mut self) {
        debug_assert!(!self.isolated, "an isolated part is undone, not abandoned");
        self.ended = true;
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
