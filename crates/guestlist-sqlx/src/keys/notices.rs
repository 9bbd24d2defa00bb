//! Notices that a key in flight got its answer (or was released) in another process, for the
//! requests waiting on it: PostgreSQL's `LISTEN`/`NOTIFY`.
//!
//! The first request of a process to wait on a key marks its row (`waited`), then listens (the
//! others wait without marking it again until the notice). The answer's `UPDATE` (or the
//! release's `DELETE`) notifies only a marked row, on a channel named as the table, and the
//! notification leaves with the commit: a key nobody waits on pays nothing. Each store listens
//! on one connection of its own, opened with the first wait. Where nothing notifies (SQLite,
//! MySQL), or while the listening connection is lost, waiters poll the key as before.

use std::sync::{Arc, Weak};
use std::time::Duration;

use guestlist_core::{IdempotencyKey, KeyNotices, Scope};
use sqlx::Pool;
use tokio::sync::watch;

use crate::backend::keys::{Key, mark_waited};
use crate::backend::{Backend, KeysSql};
use crate::{Error, SqlKeyStore};

/// The pause before the listening connection is opened again, after it failed.
const RELISTEN: Duration = Duration::from_millis(500);
/// How long the first waits wait for the channel to be listened to, before they mark their key.
const LISTENING: Duration = Duration::from_secs(1);

/// A store's notices, shared by its clones.
#[derive(Debug, Clone, Default)]
pub(crate) struct Notices {
    inner: Option<Arc<Inner>>,
}

#[derive(Debug)]
struct Inner {
    /// The keys waited on, by their name in notifications.
    watched: KeyNotices,
    /// Whether the listening task runs.
    running: std::sync::atomic::AtomicBool,
    /// Whether the channel is listened to now: a key marked before would miss its notice.
    listening: watch::Sender<bool>,
}

impl Default for Inner {
    fn default() -> Self {
        Self {
            watched: KeyNotices::default(),
            running: std::sync::atomic::AtomicBool::default(),
            listening: watch::Sender::new(false),
        }
    }
}

impl Notices {
    /// Notices where the database sends them (`sql` has the statement that asks), else none.
    pub(crate) fn new(sql: &KeysSql) -> Self {
        Self {
            inner: (!sql.mark_waited.is_empty()).then(Arc::default),
        }
    }
}

/// A key's name in notifications, as `key_name!` writes it in SQL.
fn name_of(scope: &str, key: &str) -> String {
    format!("{}:{scope}{key}", scope.chars().count())
}

/// Listens on `channel` and wakes the keys named in its notifications, opening the connection
/// again whenever it fails; ends when the store is dropped.
async fn listen<DB: Backend>(inner: Weak<Inner>, pool: Pool<DB>, channel: String) {
    struct Stopped(Weak<Inner>);
    impl Drop for Stopped {
        fn drop(&mut self) {
            if let Some(inner) = self.0.upgrade() {
                inner.listening.send_replace(false);
                inner
                    .running
                    .store(false, std::sync::atomic::Ordering::SeqCst);
            }
        }
    }
    let _stopped = Stopped(inner.clone());
    loop {
        let mut wake = match DB::listen(&pool, &channel).await {
            Ok(wake) => {
                if let Some(inner) = inner.upgrade() {
                    inner.listening.send_replace(true);
                }
                wake
            }
            Err(err) => {
                tracing::debug!(error = %err, "cannot LISTEN for keys' answers; waiters poll");
                tokio::time::sleep(RELISTEN).await;
                continue;
            }
        };
        loop {
            if inner.strong_count() == 0 {
                return;
            }
            let Some(next) = wake.next().await else {
                return; // nothing notifies here
            };
            let Some(inner) = inner.upgrade() else {
                return;
            };
            match next {
                Ok(name) => inner.watched.tell(&name),
                Err(err) => {
                    tracing::debug!(error = %err, "lost the LISTEN for keys' answers; waiters poll meanwhile");
                    // The listener opens its connection again on the next call.
                    tokio::time::sleep(RELISTEN).await;
                }
            }
        }
    }
}

impl<DB: Backend> SqlKeyStore<DB> {
    /// Resolves once `key` of `scope`, found in flight, may have changed hands: its answer
    /// stored or the key released, as the database notifies. Never where the database does not
    /// notify, nor where the key's row cannot be marked: waiters poll.
    pub(crate) async fn answered_elsewhere(&self, scope: &Scope, key: &IdempotencyKey) {
        use std::sync::atomic::Ordering::SeqCst;
        let Some(inner) = &self.notices.inner else {
            return std::future::pending().await;
        };
        if !inner.running.swap(true, SeqCst) {
            let channel = self.table().as_str().to_owned();
            let task = listen::<DB>(Arc::downgrade(inner), self.pool().clone(), channel);
            tokio::spawn(task);
        }
        let mut listening = inner.listening.subscribe();
        if !*listening.borrow_and_update() {
            // Listening first: an answer between the mark and the LISTEN would go unheard.
            let _ = tokio::time::timeout(LISTENING, listening.wait_for(|on| *on)).await;
        }
        let key = self.key_at_rest(key);
        let notice = inner.watched.watch(name_of(scope.as_str(), key.as_str()));
        // Marked by the first waiter of this process (until the answer's notice), not by each
        // every time it looks. Answered or released since the claim looked, or a claim on
        // another request's transaction (whose row no one else sees yet): the poll looks again.
        if let Err(err) = notice.heard(self.mark_waited(scope, &key)).await {
            tracing::debug!(error = %err, "cannot mark a key waited on; polling it");
            std::future::pending::<()>().await;
        }
    }

    /// Marks `key` (as stored) waited on: `true` while it is in flight.
    async fn mark_waited(&self, scope: &Scope, key: &IdempotencyKey) -> Result<bool, Error> {
        let mut conn = self.pool().acquire().await?;
        let marked = DB::run(&mut conn, &*self.sql, mark_waited(Key::of(scope, key)))
            .await
            .map_err(|err| self.error(err))?;
        Ok(marked == 1)
    }
}
