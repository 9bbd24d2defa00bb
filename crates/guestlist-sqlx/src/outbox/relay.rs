//! The relay: publishes the outbox's committed messages and stamps those the broker confirmed.

use std::future::Future;
use std::time::{Duration, Instant};

use guestlist_core::{Backoff, StopSignal, within_grace};

use crate::backend::Wake;
use crate::backend::{Backend, Stamp};
use crate::outbox::Outbox;
use crate::outbox::progress::{Progress, Round};
use crate::{Error, Health};
use guestlist_core::{Publish, PublishError};

/// Publishes an [`Outbox`]'s committed messages to a broker, and stamps each one published once
/// the broker has confirmed it: its row is deleted (or, with
/// [`keep_published`](Relay::keep_published), kept with the time it was published until the
/// [purge](Outbox::purge) removes it by age).
///
/// - **Order.** Messages go out in the order they committed for each ordering key (the outbox
///   gives each key's messages their places as their transactions commit), in batches whose
///   publishes are pipelined and confirmed together, each sent while the batch before it is
///   stamped; a key's next message in a batch goes out only once the broker confirmed the one
///   before ([`pipeline_keys`](Relay::pipeline_keys) lifts that). Every confirmed message is
///   stamped, whatever failed beside it.
/// - **Failures, told apart** ([`FailureKind`](guestlist_core::FailureKind)). A message the
///   broker refuses holds back its own ordering key: it is tried again alone, with a doubling
///   pause, while nothing after it on its key is sent and every other key flows; after
///   [`max_attempts`](Relay::max_attempts) refusals, or at once when the broker can never take
///   it ([`Publish::check`]), it moves to the outgoing dead letters (`<table>_dead`:
///   [`Outbox::dead_letters`]) with why, and its key moves on. A broker or database that is
///   down is an outage: nothing is counted against any message, the relay backs off as a
///   whole, reports it ([`Relay::health`]) and resumes by itself.
/// - **At least once.** A relay that dies between the broker's confirmation and the stamp
///   publishes those messages again. Each carries its id where the broker deduplicates, and
///   the consumers' inbox drops what gets through.
/// - **Several relays.** Run two for availability: they take turns through a lease in the
///   outbox's `_relay` table. The holder publishes; the others stand by and take over once its
///   lease expires (a crash costs at most the lease). The holder stops publishing a fifth of
///   the lease before it would expire by its own clock, and stamps only while its token holds
///   the lease, so a paused or cut-off relay neither stamps nor overtakes its successor.
/// - **Wake-up.** On PostgreSQL a trigger notifies the relay as messages commit (`LISTEN`), so
///   a thin stream does not wait for the poll interval; the poll stays as the fallback, and is
///   the only wake-up on SQLite and MySQL.
///
/// ```no_run
/// # async fn run(pool: sqlx::PgPool, publisher: impl guestlist_sqlx::Publish) -> Result<(), guestlist_sqlx::Error> {
/// use guestlist_sqlx::{Outbox, Relay};
///
/// let outbox = Outbox::<sqlx::Postgres>::new();
/// let relay = Relay::new(outbox, pool, publisher);
/// let shutdown = std::future::pending(); // in a service: its SIGTERM handler's future
/// let relayed = relay.run(shutdown).await?;
/// println!("published {}", relayed.published);
/// # Ok(()) }
/// ```
#[derive(Debug)]
pub struct Relay<DB: Backend, P> {
    pub(super) outbox: Outbox<DB>,
    pub(super) pool: sqlx::Pool<DB>,
    pub(super) publisher: P,
    pub(super) batch: usize,
    pub(super) lease: Duration,
    pub(super) poll: Duration,
    pub(super) holder: String,
    pub(super) backoff: (Duration, Duration),
    pub(super) max_attempts: u32,
    pub(super) confirm_timeout: Duration,
    pub(super) shutdown_grace: Duration,
    pub(super) pipeline_keys: bool,
    pub(super) health: Health,
    pub(super) stamp: Stamp,
}

/// What a relay did until it stopped.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct Relayed {
    /// Messages confirmed by the broker and stamped.
    pub published: u64,
    /// Of those, messages the broker recognised as repeats and dropped.
    pub duplicates: u64,
    /// Publishes the broker did not confirm (each message is tried again).
    pub failures: u64,
    /// Shards' leases this relay took (a relay alone on a table takes each of its shards once).
    pub leases_taken: u64,
    /// Messages moved to the outgoing dead letters (`<table>_dead`): refused for good, or
    /// refused [`max_attempts`](Relay::max_attempts) times.
    pub dead_lettered: u64,
}

impl<DB: Backend, P: Publish> Relay<DB, P> {
    /// Publishes until `shutdown` completes, then gives the lease up so that a standing-by
    /// relay takes over at once. A round under way finishes first, so nothing it published
    /// stays unstamped.
    ///
    /// Failures are told apart. A message the broker refuses holds back its own ordering key
    /// only, retried alone with a doubling pause, and goes to the outgoing dead letters at
    /// [`max_attempts`](Self::max_attempts); every other key flows. A broker or a database
    /// that is down is an outage: the relay stops publishing, backs off as a whole, reports it
    /// ([`Relay::health`], the `guestlist_outage` gauge, one log line per change) and resumes
    /// by itself.
    ///
    /// Stopping takes at most [`shutdown_grace`](Self::shutdown_grace): a round stuck on a
    /// database or broker that never answers is dropped there, and the lease left to expire.
    pub async fn run(&self, shutdown: impl Future<Output = ()>) -> Result<Relayed, Error> {
        let mut totals = Relayed::default();
        let stopped = within_grace(shutdown, self.shutdown_grace, |stop| {
            self.publish_until(stop, &mut totals)
        })
        .await;
        if stopped.is_none() {
            tracing::warn!(table = %self.outbox.table(), grace = ?self.shutdown_grace,
                "the relay did not finish within its shutdown grace: it stopped where it stood; \
                 its lease expires by itself and what it had not stamped is published again");
        }
        Ok(totals)
    }

    /// [`run`](Self::run)'s loop, until `shutdown`, then the last stamp and the lease given up.
    async fn publish_until(&self, shutdown: StopSignal, totals: &mut Relayed) {
        let mut progress = Progress::new(self.batch);
        let mut wake = self.wake().await;
        self.warm_up().await;
        let mut outage = Backoff::new(self.backoff.0, self.backoff.1);
        let mut broker_down = false;
        let mut backlog_read = None::<Instant>;
        let mut backlog: Option<tokio::task::JoinHandle<()>> = None;
        tokio::pin!(shutdown);
        loop {
            if stopping(&mut shutdown).await {
                break;
            }
            if self.coordination_due(&progress)
                && let Err(err) = self.coordinate(&mut progress, totals).await
            {
                self.health.outage(format_args!("the database: {err}"));
                tokio::select! {
                    () = &mut shutdown => break,
                    () = tokio::time::sleep(outage.next_pause()) => continue,
                }
            }
            let round = self.round(&mut progress, totals, true).await;
            self.release_left(&mut progress).await;
            // Read beside the rounds, never in their way: on a large table the count can take
            // longer than a thin stream's messages may wait.
            if progress.lease.is_some()
                && backlog_read.is_none_or(|at| at.elapsed() >= BACKLOG_EVERY)
                && backlog.as_ref().is_none_or(|read| read.is_finished())
            {
                backlog_read = Some(Instant::now());
                backlog = Some(tokio::spawn(report_backlog(
                    self.pool.clone(),
                    self.outbox.clone(),
                )));
            }
            self.warn_if_stuck(&mut progress, broker_down);
            let wait = match round {
                Ok(round @ (Round::More | Round::Idle)) => {
                    // A broker that was down is up again once it confirms, or once nothing
                    // is left to ask it; a database, once a round went through.
                    let idle = matches!(round, Round::Idle) && progress.carried.is_none();
                    if !broker_down || progress.confirmed || (idle && progress.held.is_empty()) {
                        broker_down = false;
                        outage.reset();
                        self.health.recovered();
                    }
                    if matches!(round, Round::More) {
                        continue;
                    }
                    let wait = progress.held.next_due_in().map_or(self.poll, |due| {
                        due.clamp(Duration::from_millis(1), self.poll)
                    });
                    tokio::select! {
                        () = &mut shutdown => break,
                        () = wake.wait(wait) => continue,
                    }
                }
                Ok(Round::Standby) => self.poll,
                Ok(Round::Outage(err)) => {
                    broker_down = true;
                    self.health.outage(format_args!("the broker: {err}"));
                    outage.next_pause()
                }
                Err(err) => {
                    self.health.outage(format_args!("the database: {err}"));
                    outage.next_pause()
                }
            };
            tokio::select! {
                () = &mut shutdown => break,
                () = tokio::time::sleep(wait) => {}
            }
        }
        if let Some(read) = backlog {
            read.abort();
        }
        self.finish(progress, totals).await;
    }

    /// Publishes what is pending now on the shards it can take, one round after another, until
    /// nothing more can go out; `None` when other relays hold every shard. For tests and
    /// one-off drains: a message the broker refused (its key held back) or an outage ends it
    /// with [`Error::Publish`], after everything else went out.
    pub async fn drain(&self) -> Result<Option<Relayed>, Error> {
        let mut totals = Relayed::default();
        let mut progress = Progress::new(self.batch);
        if let Err(err) = self.coordinate(&mut progress, &mut totals).await {
            self.leave_registry().await;
            return Err(err);
        }
        let outcome = loop {
            match self.round(&mut progress, &mut totals, true).await {
                Ok(Round::More) => continue,
                Ok(Round::Idle) if progress.held.is_empty() => break Ok(Some(totals)),
                Ok(Round::Idle) => {
                    let causes = progress.held.causes().join("; ");
                    break Err(Error::Publish(PublishError::new(causes)));
                }
                Ok(Round::Standby) => break Ok(None),
                Ok(Round::Outage(err)) => break Err(Error::Publish(err)),
                Err(err) => break Err(err),
            }
        };
        self.finish(progress, &mut totals).await;
        outcome.map(|relayed| relayed.map(|_| totals))
    }

    /// Stamps the batch in hand, then gives its shards up and leaves the registry.
    async fn finish(&self, mut progress: Progress, totals: &mut Relayed) {
        if progress.carried.is_some()
            && let Err(err) = self.round(&mut progress, totals, false).await
        {
            tracing::warn!(table = %self.outbox.table(), error = %err,
                "the last batch was not stamped: it is published again later");
        }
        if let Some(lease) = progress.lease.take() {
            self.release(&lease.held()).await;
        }
        self.leave_registry().await;
    }

    /// Opens the connections the relay uses at once (the round's, the stamp's, the lease's
    /// mid-round renewal, the backlog reader's) before it publishes, so that none is opened
    /// mid-stream: on a busy machine a new connection (TLS, authentication, a server process)
    /// costs tens of milliseconds, and a thin stream's messages would wait for it.
    ///
    /// It never waits for a connection the pool cannot open: with the `LISTEN` holding one of a
    /// small pool's connections, waiting for the last would cost the pool's acquire timeout
    /// (30 s by default) before the first message went out.
    async fn warm_up(&self) {
        let max = self.pool.options().get_max_connections();
        let mut held = Vec::new();
        for _ in 0..max.min(WARM_CONNECTIONS) {
            let conn = match self.pool.try_acquire() {
                Some(conn) => conn,
                None if self.pool.size() < max => match self.pool.acquire().await {
                    Ok(conn) => conn,
                    Err(err) => {
                        tracing::debug!(error = %err, "outbox relay could not warm its pool");
                        break;
                    }
                },
                None => break,
            };
            held.push(conn);
        }
    }

    /// A `LISTEN` where the database has one, else the poll alone.
    async fn wake(&self) -> Wake {
        match DB::listen(&self.pool, self.outbox.table().as_str()).await {
            Ok(wake) => {
                tracing::info!(table = %self.outbox.table(), listens = wake.listens(),
                    poll = ?self.poll, "outbox relay started");
                wake
            }
            Err(err) => {
                tracing::warn!(table = %self.outbox.table(), error = %err,
                    "outbox relay cannot LISTEN; polling only");
                Wake::polling()
            }
        }
    }

    /// A pooled connection, its failure named after the outbox's table.
    pub(super) async fn connection(&self) -> Result<sqlx::pool::PoolConnection<DB>, Error> {
        self.pool.acquire().await.map_err(|e| self.error(e))
    }

    pub(super) fn error(&self, err: sqlx::Error) -> Error {
        Error::from_store::<DB>(self.outbox.table(), err)
    }
}

/// How often the holder reads the backlog for its gauges.
const BACKLOG_EVERY: Duration = Duration::from_secs(5);
/// Connections a running relay may use at once: a round's, a stamp's, the lease's mid-round
/// renewal, the backlog reader's.
const WARM_CONNECTIONS: u32 = 4;

/// Sets the gauges of what is pending in `outbox`.
async fn report_backlog<DB: Backend>(pool: sqlx::Pool<DB>, outbox: Outbox<DB>) {
    let read = async {
        let mut conn = pool.acquire().await?;
        DB::outbox_backlog(&mut conn, &outbox.relay).await
    };
    match read.await {
        Ok(backlog) => {
            let table = outbox.table().to_string();
            metrics::gauge!("guestlist_outbox_pending", "table" => table.clone())
                .set(backlog.pending as f64);
            metrics::gauge!("guestlist_outbox_oldest_pending_seconds", "table" => table)
                .set(backlog.oldest_ms.unwrap_or(0).max(0) as f64 / 1000.0);
        }
        Err(err) => tracing::debug!(error = %err, "outbox backlog not read"),
    }
    match outbox.dead_count(&pool).await {
        Ok(dead) => {
            metrics::gauge!("guestlist_outbox_dead", "table" => outbox.table().to_string())
                .set(dead as f64);
        }
        Err(err) => tracing::debug!(error = %err, "outbox dead letters not counted"),
    }
}

/// Whether `shutdown` has completed, without waiting for it.
async fn stopping(shutdown: &mut std::pin::Pin<&mut impl Future<Output = ()>>) -> bool {
    tokio::select! {
        biased;
        () = shutdown.as_mut() => true,
        () = std::future::ready(()) => false,
    }
}
