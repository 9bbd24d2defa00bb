//! The process's holder: a database session that holds a lock of its own for as long as the
//! process lives, so that a retry can tell that the attempt holding a key died with its process
//! and take the key over at once, instead of waiting for the attempt's lease.
//!
//! Each claim records the holder's number on its row. A retry that finds the key in flight asks
//! the database whether that number's lock is still held: PostgreSQL shows every session's
//! advisory locks in `pg_locks`, MySQL and MariaDB every named lock through `IS_USED_LOCK`. When
//! the process died, its session ended and its lock with it: the attempt's lease is cut and the
//! retry takes the key over. A holder that is alive but stalled keeps its lock, and its
//! attempts are fenced by their lease as before. SQLite has no sessions to end: its keys wait
//! for their lease.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, PoisonError, Weak};
use std::time::{Duration, Instant};

use sqlx::{Connection, Pool};
use tokio::sync::watch;

use guestlist_core::{IdempotencyKey, Scope};

use crate::backend::keys::{Key, KeyRow, cut_lease};
use crate::backend::statement::Plain;
use crate::backend::{Backend, KeysSql};
use crate::{Error, SqlKeyStore};

/// How long the first claims wait for the holder's session to hold its lock: past it, a claim
/// records no holder, and its key waits for the lease if the process dies. Later claims do not
/// wait: while the session is opened again, they record no holder.
const READY: Duration = Duration::from_secs(2);
/// How often the holder's session is checked.
const PING: Duration = Duration::from_millis(500);
/// How long a holder seen alive is taken to stay so: the retries of one key ask once per this.
const SEEN_ALIVE: Duration = Duration::from_millis(250);
/// How long a holder must be seen without its lock before it counts as gone: longer than its
/// session takes to notice a failure ([`PING`]) and open again, so that a database restart or
/// a cut connection does not hand a live process's keys to another.
const GONE_FOR: Duration = Duration::from_secs(1);
/// When a holder seen without its lock, and not asked about since, is forgotten.
const FORGET_MISSING: Duration = Duration::from_secs(60);
/// The pause before the holder's session is opened again, after it failed.
const RECONNECT: Duration = Duration::from_millis(500);

/// The process's holder, shared by a store's clones.
#[derive(Debug, Clone)]
pub(crate) struct Holder {
    inner: Option<Arc<Inner>>,
}

#[derive(Debug)]
struct Inner {
    /// This holder's number (1 to 2³¹ - 1), drawn again if another session holds its lock.
    number: std::sync::atomic::AtomicI64,
    /// Whether the session holds the lock now.
    held: watch::Sender<bool>,
    /// Whether the session's task runs.
    running: std::sync::atomic::AtomicBool,
    /// Whether the session ever held the lock.
    ever_held: std::sync::atomic::AtomicBool,
    /// What this process saw of other holders.
    seen: Mutex<Seen>,
    /// Dropped with the last store: the session ends.
    _closed: watch::Sender<()>,
}

impl Holder {
    /// A holder where the database can tell a dead one (`sql` has the statements), else none.
    pub(crate) fn new(sql: &KeysSql) -> Self {
        if sql.holder_lock.is_empty() {
            return Self::none();
        }
        Self {
            inner: Some(Arc::new(Inner {
                number: std::sync::atomic::AtomicI64::new(draw()),
                held: watch::Sender::new(false),
                running: std::sync::atomic::AtomicBool::new(false),
                ever_held: std::sync::atomic::AtomicBool::new(false),
                seen: Mutex::default(),
                _closed: watch::Sender::new(()),
            })),
        }
    }

    /// No holder: every key waits for its lease.
    pub(crate) fn none() -> Self {
        Self { inner: None }
    }

    /// The number a claim records while the session holds its lock (started by the first claim,
    /// and again if its task ended); `None` where there is no holder, or its session does not
    /// hold the lock now.
    pub(crate) async fn number<DB: Backend>(
        &self,
        pool: &Pool<DB>,
        sql: &Arc<KeysSql>,
    ) -> Option<i64> {
        use std::sync::atomic::Ordering::{Relaxed, SeqCst};
        let inner = self.inner.as_ref()?;
        if !inner.running.swap(true, SeqCst) {
            let task = hold::<DB>(Arc::downgrade(inner), pool.clone(), Arc::clone(sql));
            tokio::spawn(task);
        }
        let mut held = inner.held.subscribe();
        if !*held.borrow_and_update() {
            if inner.ever_held.load(SeqCst) {
                return None;
            }
            let ready = tokio::time::timeout(READY, held.wait_for(|held| *held)).await;
            if !matches!(ready, Ok(Ok(_))) {
                return None;
            }
        }
        Some(inner.number.load(Relaxed))
    }

    /// Whether `holder` is gone: no session has held its lock for [`GONE_FOR`], so the attempt
    /// it held died with its process. Never one of this process's own numbers: this process
    /// lives, even while its session is opened again.
    pub(crate) async fn gone<DB: Backend>(
        &self,
        conn: &mut DB::Connection,
        sql: &KeysSql,
        holder: i64,
    ) -> Result<bool, sqlx::Error> {
        use std::sync::atomic::Ordering::Relaxed;
        let Some(inner) = &self.inner else {
            return Ok(false);
        };
        let now = Instant::now();
        {
            let mut seen = inner.seen();
            if holder == inner.number.load(Relaxed) || seen.retired.contains(&holder) {
                return Ok(false);
            }
            seen.alive
                .retain(|_, at| now.duration_since(*at) < SEEN_ALIVE);
            seen.missing
                .retain(|_, at| now.duration_since(*at) < FORGET_MISSING);
            if seen.alive.contains_key(&holder) {
                return Ok(false);
            }
        }
        let alive = Plain::reading(|sql: &KeysSql| &sql.holder_alive, (holder,));
        let (alive,): (i64,) = DB::fetch_one(conn, sql, alive).await?;
        let mut seen = inner.seen();
        if alive == 1 {
            seen.missing.remove(&holder);
            seen.alive.insert(holder, now);
            return Ok(false);
        }
        let since = *seen.missing.entry(holder).or_insert(now);
        Ok(now.duration_since(since) >= GONE_FOR)
    }
}

impl Inner {
    fn seen(&self) -> std::sync::MutexGuard<'_, Seen> {
        // Plain maps, whole after any panic between their statements.
        self.seen.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

/// What this process saw of other holders, and the numbers it held before its current one.
#[derive(Debug, Default)]
struct Seen {
    /// Holders seen alive lately, and when.
    alive: HashMap<i64, Instant>,
    /// Holders seen without their lock, and since when.
    missing: HashMap<i64, Instant>,
    /// This process's earlier numbers (another session held one's lock when it opened again).
    retired: Vec<i64>,
}

/// A holder's number: random, positive, within 31 bits (PostgreSQL's lock takes an `integer`).
/// Without the OS's randomness, the process's id: a clash only makes a dead holder look alive
/// (its keys then wait for the lease).
fn draw() -> i64 {
    let random = getrandom::u32().unwrap_or_else(|_| std::process::id());
    i64::from(random & 0x7fff_ffff).max(1)
}

/// Marks the lock not held when the session's task ends, however it ends (its runtime shut
/// down, say): a claim then records no holder rather than one nobody holds, and starts the task
/// again.
struct Unheld(Weak<Inner>);

impl Drop for Unheld {
    fn drop(&mut self) {
        if let Some(inner) = self.0.upgrade() {
            inner.held.send_replace(false);
            inner
                .running
                .store(false, std::sync::atomic::Ordering::SeqCst);
        }
    }
}

/// Keeps the holder's session: opens it apart from the pool, takes the lock, checks the session
/// every [`PING`], and opens it again when it fails; ends when the last store is dropped.
async fn hold<DB: Backend>(inner: Weak<Inner>, pool: Pool<DB>, sql: Arc<KeysSql>) {
    use std::sync::atomic::Ordering::Relaxed;
    let _unheld = Unheld(inner.clone());
    let Some(mut closed) = inner.upgrade().map(|inner| inner._closed.subscribe()) else {
        return;
    };
    loop {
        let Some(number) = inner.upgrade().map(|inner| inner.number.load(Relaxed)) else {
            return;
        };
        match session::<DB>(&pool, &sql, number, &inner, &mut closed).await {
            Ok(Ended::Closed) => return,
            Ok(Ended::Taken) => {
                // Another session holds this number's lock: draw another.
                if let Some(inner) = inner.upgrade() {
                    let retired = inner.number.swap(draw(), Relaxed);
                    inner.seen().retired.push(retired);
                }
            }
            Err(err) => {
                tracing::warn!(error = %err, "the key store's holder session failed; keys claimed meanwhile wait for their lease if this process dies");
                tokio::time::sleep(RECONNECT).await;
            }
        }
        if let Some(inner) = inner.upgrade() {
            inner.held.send_replace(false);
        }
    }
}

/// How a holder's session ended without failing.
enum Ended {
    /// The last store was dropped.
    Closed,
    /// Another session held the number's lock.
    Taken,
}

/// One session of the holder: holds the lock of `number` until the session fails or the store
/// is dropped.
async fn session<DB: Backend>(
    pool: &Pool<DB>,
    sql: &KeysSql,
    number: i64,
    inner: &Weak<Inner>,
    closed: &mut watch::Receiver<()>,
) -> Result<Ended, sqlx::Error> {
    // Apart from the pool: the session lives as long as the process, and takes no slot.
    let mut conn = DB::Connection::connect_with(&*pool.connect_options()).await?;
    let lock = Plain::reading(|sql: &KeysSql| &sql.holder_lock, (number,));
    let (held,): (i64,) = DB::fetch_one(&mut conn, sql, lock).await?;
    if held != 1 {
        return Ok(Ended::Taken);
    }
    match inner.upgrade() {
        Some(inner) => {
            inner.held.send_replace(true);
            inner
                .ever_held
                .store(true, std::sync::atomic::Ordering::SeqCst);
        }
        None => return Ok(Ended::Closed),
    }
    loop {
        tokio::select! {
            changed = closed.changed() => if changed.is_err() {
                return Ok(Ended::Closed);
            },
            () = tokio::time::sleep(PING) => conn.ping().await?,
        }
    }
}

impl<DB: Backend> SqlKeyStore<DB> {
    /// Whether this database tells a retry that the process holding a key died, so that the key
    /// is free at once instead of after its lease ([`SqlKeyStore::lease_only`]): PostgreSQL and
    /// MySQL/MariaDB can (a lock of the process's own session ends with it); SQLite cannot.
    pub fn detects_dead_holders() -> bool {
        !<DB as crate::backend::sealed::KeyStatements>::KEY_HOLDER_LOCK.is_empty()
    }

    /// Lets a key whose attempt died with its process wait for the attempt's lease, as on
    /// SQLite, instead of freeing it for the next retry at once.
    ///
    /// By default, on PostgreSQL and MySQL/MariaDB, the store keeps one session of its own for
    /// as long as the process lives (apart from the pool), holding a lock that ends with it
    /// (an advisory lock; `GET_LOCK`), and each claim records it. A retry that finds the key in
    /// flight asks whether that lock is still held: if the process died, the retry takes the
    /// key over at once. Turn it off behind a proxy that pools transactions (PgBouncer's
    /// transaction mode), where a session's lock says nothing about the process that took it.
    pub fn lease_only(mut self) -> Self {
        self.holder = Holder::none();
        self
    }

    /// The holder a claim records now, if any.
    pub(crate) async fn holder(&self) -> Option<i64> {
        self.holder.number(&self.pool, &self.sql).await
    }

    /// Ends the lease of the attempt holding `row` if its holder is gone (see [`Holder::gone`]):
    /// `true` when it did, and the key is the next claim's to take over.
    pub(crate) async fn cut_if_holder_gone(
        &self,
        conn: &mut DB::Connection,
        scope: &Scope,
        key: &IdempotencyKey,
        row: &KeyRow,
    ) -> Result<bool, Error> {
        let Some(holder) = row.holder else {
            return Ok(false);
        };
        let gone = self.holder.gone::<DB>(conn, &self.sql, holder);
        if !gone.await.map_err(|err| self.error(err))? {
            return Ok(false);
        }
        let cut = cut_lease(Key::of(scope, key), row.token);
        DB::run(conn, &*self.sql, cut)
            .await
            .map_err(|err| self.error(err))?;
        tracing::info!(
            scope = scope.as_str(),
            key = key.as_str(),
            "the process holding the key is gone; its lease ends now"
        );
        Ok(true)
    }
}
