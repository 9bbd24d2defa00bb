//! The relay: publishes the outbox's committed messages and stamps those the broker confirmed.

use std::collections::HashSet;
use std::future::Future;
use std::time::{Duration, Instant};

use crate::backend::{Backend, PendingRow};
use crate::outbox::lease::Lease;
use crate::outbox::publish::{Confirmed, OutboxMessage, Publish, PublishError};
use crate::outbox::{Outbox, Wake};
use crate::{Error, keys::new_token};

/// Publishes an [`Outbox`]'s committed messages to a broker, and stamps each one published once
/// the broker has confirmed it.
///
/// - **Order.** Messages go out in the order they committed for each ordering key (the outbox
///   gives each key's messages their places as their transactions commit), in batches whose
///   publishes are pipelined and confirmed together, each sent while the batch before it is
///   stamped. When a message is not confirmed, it stays pending with the later messages of its
///   key in its batch and the batch sent alongside, and they go again after it; a later message
///   the broker had already stored then arrives before the retry.
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
    outbox: Outbox<DB>,
    pool: sqlx::Pool<DB>,
    publisher: P,
    batch: usize,
    lease: Duration,
    poll: Duration,
    holder: String,
    retry: Duration,
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
    /// Times this relay took the lease.
    pub leases_taken: u64,
}

/// Where a relay stands between rounds.
#[derive(Default)]
struct Progress {
    /// The lease, while this relay holds it.
    lease: Option<Lease>,
    /// The batch published last round, to be stamped this round.
    carried: Option<Published>,
}

/// A batch the broker has answered for, waiting for its stamp.
struct Published {
    rows: Vec<PendingRow>,
    outcomes: Vec<Result<Confirmed, PublishError>>,
}

impl Published {
    fn ids(&self) -> Vec<i64> {
        self.rows.iter().map(|row| row.id).collect()
    }
}

/// What one round found.
enum Round {
    /// A full batch: there may be more at once.
    More,
    /// Less than a batch: wait for a commit or the poll.
    Idle,
    /// Another relay holds the lease.
    Standby,
    /// The broker did not confirm some messages: wait before trying them again.
    Failed(PublishError),
}

impl<DB: Backend, P: Publish> Relay<DB, P> {
    /// Messages per round unless set.
    pub const DEFAULT_BATCH: usize = 500;
    /// The lease unless set: how long a crashed relay keeps its successor waiting.
    pub const DEFAULT_LEASE: Duration = Duration::from_secs(10);
    /// How often an idle relay looks for messages without a notification, unless set.
    pub const DEFAULT_POLL: Duration = Duration::from_millis(500);

    /// A relay publishing `outbox`'s messages, read from `pool`, with `publisher`.
    pub fn new(outbox: Outbox<DB>, pool: sqlx::Pool<DB>, publisher: P) -> Self {
        let holder = format!(
            "relay-{}-{:08x}",
            std::process::id(),
            new_token().unwrap_or_default() as u32
        );
        Self {
            outbox,
            pool,
            publisher,
            batch: Self::DEFAULT_BATCH,
            lease: Self::DEFAULT_LEASE,
            poll: Self::DEFAULT_POLL,
            holder,
            retry: Duration::from_millis(200),
        }
    }

    /// At most `messages` per round (at least 1).
    pub fn batch(mut self, messages: usize) -> Self {
        self.batch = messages.max(1);
        self
    }

    /// The lease's length (at least 100 ms): the longest a crashed relay keeps a standing-by
    /// one waiting, and the longest a round may wait for confirmations.
    pub fn lease(mut self, lease: Duration) -> Self {
        self.lease = lease.max(Duration::from_millis(100));
        self
    }

    /// How often an idle relay looks for messages without being woken, and a standing-by one
    /// for an expired lease.
    pub fn poll(mut self, every: Duration) -> Self {
        self.poll = every.max(Duration::from_millis(1));
        self
    }

    /// The name this relay holds the lease under, for operators (`guestlist stats`).
    /// Defaults to `relay-<pid>-<random>`; give each relay its own.
    pub fn holder(mut self, name: impl Into<String>) -> Self {
        self.holder = name.into();
        self
    }

    /// Publishes until `shutdown` completes, then gives the lease up so that a standing-by
    /// relay takes over at once. A round under way finishes first, so nothing it published
    /// stays unstamped. Database and broker failures are logged and retried, with a growing
    /// pause: the relay outlives them.
    pub async fn run(&self, shutdown: impl Future<Output = ()>) -> Result<Relayed, Error> {
        let mut totals = Relayed::default();
        let mut progress = Progress::default();
        let mut wake = self.wake().await;
        self.warm_up().await;
        let mut pause = self.retry;
        let mut backlog_read = None::<Instant>;
        let mut backlog: Option<tokio::task::JoinHandle<()>> = None;
        tokio::pin!(shutdown);
        loop {
            if stopping(&mut shutdown).await {
                break;
            }
            let round = self.round(&mut progress, &mut totals, true).await;
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
            let wait = match round {
                Ok(Round::More) => {
                    pause = self.retry;
                    continue;
                }
                Ok(Round::Idle) => {
                    pause = self.retry;
                    tokio::select! {
                        () = &mut shutdown => break,
                        () = wake.wait(self.poll) => continue,
                    }
                }
                Ok(Round::Standby) => self.poll,
                Ok(Round::Failed(err)) => {
                    tracing::warn!(table = %self.outbox.table(), error = %err, retry_in = ?pause,
                        "the broker did not confirm every message; they stay pending");
                    backed_off(&mut pause)
                }
                Err(err) => {
                    tracing::warn!(table = %self.outbox.table(), error = %err, retry_in = ?pause,
                        "outbox relay round failed");
                    backed_off(&mut pause)
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
        self.finish(progress, &mut totals).await;
        Ok(totals)
    }

    /// Publishes what is pending now, one round after another, until a round finds less than
    /// a batch; `None` when another relay holds the lease. For tests and one-off drains.
    pub async fn drain(&self) -> Result<Option<Relayed>, Error> {
        let mut totals = Relayed::default();
        let mut progress = Progress::default();
        let outcome = loop {
            match self.round(&mut progress, &mut totals, true).await {
                Ok(Round::More) => continue,
                Ok(Round::Idle) => break Ok(Some(totals)),
                Ok(Round::Standby) => break Ok(None),
                Ok(Round::Failed(err)) => break Err(Error::Publish(err)),
                Err(err) => break Err(err),
            }
        };
        self.finish(progress, &mut totals).await;
        outcome.map(|relayed| relayed.map(|_| totals))
    }

    /// Stamps the batch in hand, then gives the lease up.
    async fn finish(&self, mut progress: Progress, totals: &mut Relayed) {
        if progress.carried.is_some()
            && let Err(err) = self.round(&mut progress, totals, false).await
        {
            tracing::warn!(table = %self.outbox.table(), error = %err,
                "the last batch was not stamped: it is published again later");
        }
        if let Some(lease) = progress.lease {
            self.release(lease).await;
        }
    }

    /// One round: the lease; the next batch of pending messages (unless `read_more` is
    /// false), published while the previous round's batch is stamped.
    async fn round(
        &self,
        progress: &mut Progress,
        totals: &mut Relayed,
        read_more: bool,
    ) -> Result<Round, Error> {
        let sql = &self.outbox.relay;
        let lease_ms = i64::try_from(self.lease.as_millis()).unwrap_or(i64::MAX);
        let lease = match progress.lease.filter(Lease::usable) {
            Some(lease) => lease,
            None => {
                // A batch published under a lease now gone stays pending: it goes again.
                progress.lease = None;
                progress.carried = None;
                let asked = Instant::now();
                let mut conn = self.connection().await?;
                let taken = DB::relay_take(&mut conn, sql, &self.holder, lease_ms)
                    .await
                    .map_err(|e| self.error(e))?;
                let Some(token) = taken else {
                    return Ok(Round::Standby);
                };
                totals.leases_taken += 1;
                tracing::info!(table = %self.outbox.table(), holder = %self.holder, token,
                    "outbox relay took the lease");
                let lease = Lease::taken(token, self.lease, asked);
                progress.lease = Some(lease);
                lease
            }
        };
        let rows = if read_more {
            let exclude = progress
                .carried
                .as_ref()
                .map(Published::ids)
                .unwrap_or_default();
            let limit = i64::try_from(self.batch).unwrap_or(i64::MAX);
            let mut conn = self.connection().await?;
            DB::relay_pending(&mut conn, sql, limit, &exclude)
                .await
                .map_err(|e| self.error(e))?
        } else {
            Vec::new()
        };
        let Some(carried) = progress.carried.take() else {
            if rows.is_empty() {
                self.renew_if_due(progress, lease, lease_ms).await?;
                return Ok(Round::Idle);
            }
            let outcomes = self.publish(&rows, lease).await;
            progress.carried = Some(Published { rows, outcomes });
            return Ok(Round::More);
        };

        // The broker confirms the new batch while the database stamps the previous one.
        let settled = Settled::sort(&carried.rows, carried.outcomes);
        let stamp = async {
            let asked = Instant::now();
            let mut conn = self.pool.acquire().await?;
            let kept =
                DB::relay_stamp(&mut conn, sql, lease.token, lease_ms, &settled.stamp).await?;
            Ok::<_, sqlx::Error>((kept, asked))
        };
        let (outcomes, stamped) = tokio::join!(self.publish(&rows, lease), stamp);
        let (kept, asked) = stamped.map_err(|e| self.error(e))?;
        if !kept {
            progress.lease = None;
            return Ok(self.lost(lease));
        }
        if let Some(lease) = progress.lease.as_mut() {
            lease.renewed(asked);
        }
        self.count(&settled, totals);
        if let Some(err) = settled.error {
            // The new batch may hold later messages of a key whose message went unconfirmed:
            // it stays pending, and goes again after it.
            return Ok(Round::Failed(err));
        }
        if rows.is_empty() {
            return Ok(Round::Idle);
        }
        // More may be waiting; and even less than a batch is stamped at once, the next round.
        progress.carried = Some(Published { rows, outcomes });
        Ok(Round::More)
    }

    /// Publishes `rows` and waits for their confirmations while the lease lasts; missing
    /// outcomes count as unconfirmed.
    async fn publish(
        &self,
        rows: &[PendingRow],
        lease: Lease,
    ) -> Vec<Result<Confirmed, PublishError>> {
        if rows.is_empty() {
            return Vec::new();
        }
        let messages: Vec<OutboxMessage> = rows.iter().map(message).collect();
        tokio::time::timeout(lease.time_left(), self.publisher.publish(&messages))
            .await
            .unwrap_or_default()
    }

    /// Renews an idle relay's lease once a third of it has gone by.
    async fn renew_if_due(
        &self,
        progress: &mut Progress,
        lease: Lease,
        lease_ms: i64,
    ) -> Result<(), Error> {
        if !lease.due() {
            return Ok(());
        }
        let asked = Instant::now();
        let mut conn = self.connection().await?;
        let kept = DB::relay_renew(&mut conn, &self.outbox.relay, lease.token, lease_ms)
            .await
            .map_err(|e| self.error(e))?;
        match progress.lease.as_mut() {
            Some(held) if kept => held.renewed(asked),
            _ => {
                progress.lease = None;
                self.lost(lease);
            }
        }
        Ok(())
    }

    /// Adds a stamped batch to the totals and the metrics.
    fn count(&self, settled: &Settled, totals: &mut Relayed) {
        let table = self.outbox.table().to_string();
        let published = settled.stamp.len() as u64;
        totals.published += published;
        totals.duplicates += settled.duplicates;
        totals.failures += settled.failures;
        metrics::counter!("guestlist_outbox_published_total", "table" => table.clone())
            .increment(published);
        metrics::counter!("guestlist_outbox_broker_duplicates_total", "table" => table.clone())
            .increment(settled.duplicates);
        metrics::counter!("guestlist_outbox_publish_failures_total", "table" => table)
            .increment(settled.failures);
    }

    /// Logs a lease another relay took over.
    fn lost(&self, lease: Lease) -> Round {
        tracing::warn!(table = %self.outbox.table(), holder = %self.holder, token = lease.token,
            "outbox relay lost its lease to another relay; standing by");
        Round::Standby
    }

    /// Gives the lease up, so that a standing-by relay takes over at once.
    async fn release(&self, lease: Lease) {
        let released = async {
            let mut conn = self.pool.acquire().await?;
            DB::relay_release(&mut conn, &self.outbox.relay, lease.token).await
        };
        if let Err(err) = released.await {
            tracing::warn!(table = %self.outbox.table(), error = %err,
                "outbox relay could not give its lease up; it expires on its own");
        }
    }

    /// Opens the connections the relay uses at once (the round's, the stamp's, the backlog
    /// reader's) before it publishes, so that none is opened mid-stream: on a busy machine a
    /// new connection (TLS, authentication, a server process) costs tens of milliseconds, and a
    /// thin stream's messages would wait for it.
    async fn warm_up(&self) {
        let wanted = self
            .pool
            .options()
            .get_max_connections()
            .min(WARM_CONNECTIONS);
        let mut held = Vec::new();
        for _ in 0..wanted {
            match self.pool.acquire().await {
                Ok(conn) => held.push(conn),
                Err(err) => {
                    tracing::debug!(error = %err, "outbox relay could not warm its pool");
                    break;
                }
            }
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
    async fn connection(&self) -> Result<sqlx::pool::PoolConnection<DB>, Error> {
        self.pool.acquire().await.map_err(|e| self.error(e))
    }

    fn error(&self, err: sqlx::Error) -> Error {
        Error::from_store::<DB>(self.outbox.table(), err)
    }
}

/// How often the holder reads the backlog for its gauges.
const BACKLOG_EVERY: Duration = Duration::from_secs(5);
/// Connections a running relay may use at once: a round's, a stamp's, the backlog reader's.
const WARM_CONNECTIONS: u32 = 3;
/// The longest pause between failed rounds.
const MAX_PAUSE: Duration = Duration::from_secs(5);

/// Sets the gauges of what is pending in `outbox`.
async fn report_backlog<DB: Backend>(pool: sqlx::Pool<DB>, outbox: Outbox<DB>) {
    let read = async {
        let mut conn = pool.acquire().await?;
        DB::outbox_backlog(&mut conn, &outbox.relay).await
    };
    match read.await {
        Ok((pending, oldest_ms)) => {
            let table = outbox.table().to_string();
            metrics::gauge!("guestlist_outbox_pending", "table" => table.clone())
                .set(pending as f64);
            metrics::gauge!("guestlist_outbox_oldest_pending_seconds", "table" => table)
                .set(oldest_ms.unwrap_or(0).max(0) as f64 / 1000.0);
        }
        Err(err) => tracing::debug!(error = %err, "outbox backlog not read"),
    }
}

/// The pause to wait now, doubling the next one up to [`MAX_PAUSE`].
fn backed_off(pause: &mut Duration) -> Duration {
    let now = *pause;
    *pause = (now * 2).min(MAX_PAUSE);
    now
}

/// Whether `shutdown` has completed, without waiting for it.
async fn stopping(shutdown: &mut std::pin::Pin<&mut impl Future<Output = ()>>) -> bool {
    tokio::select! {
        biased;
        () = shutdown.as_mut() => true,
        () = std::future::ready(()) => false,
    }
}

/// A pending row as the publisher sees it.
fn message(row: &PendingRow) -> OutboxMessage {
    OutboxMessage {
        message_id: row.message_id.clone(),
        topic: row.topic.clone(),
        ordering_key: row.ordering_key.clone(),
        seq: row.seq,
        headers: OutboxMessage::decode_headers(row.headers.as_deref()),
        payload: row.payload.clone(),
    }
}

/// A batch's outcomes, sorted into what may be stamped and what stays pending.
struct Settled {
    /// Rows confirmed, with every earlier row of their ordering key in the batch confirmed.
    stamp: Vec<i64>,
    duplicates: u64,
    failures: u64,
    error: Option<PublishError>,
}

impl Settled {
    /// Sorts `outcomes`, one per row in order (missing ones count as unconfirmed: the round
    /// ran out of lease waiting for them).
    fn sort(rows: &[PendingRow], outcomes: Vec<Result<Confirmed, PublishError>>) -> Self {
        let mut settled = Self {
            stamp: Vec::with_capacity(rows.len()),
            duplicates: 0,
            failures: 0,
            error: None,
        };
        let mut outcomes = outcomes.into_iter();
        let mut held_back: HashSet<&str> = HashSet::new();
        for row in rows {
            let key = row.ordering_key.as_deref();
            let outcome = outcomes.next().unwrap_or_else(|| {
                Err(PublishError::new(
                    "no confirmation before the relay's lease ran out",
                ))
            });
            match outcome {
                Ok(confirmed) if key.is_none_or(|key| !held_back.contains(key)) => {
                    settled.stamp.push(row.id);
                    settled.duplicates += u64::from(confirmed == Confirmed::Duplicate);
                }
                // Confirmed, but an earlier message of its key was not: it goes again after it.
                Ok(_) => {}
                Err(err) => {
                    settled.failures += 1;
                    settled.error.get_or_insert(err);
                    if let Some(key) = key {
                        held_back.insert(key);
                    }
                }
            }
        }
        settled
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn row(id: i64, key: Option<&str>) -> PendingRow {
        PendingRow {
            id,
            message_id: format!("m{id}"),
            topic: "t".into(),
            ordering_key: key.map(str::to_owned),
            seq: id,
            headers: None,
            payload: Vec::new(),
        }
    }

    #[test]
    fn a_message_not_confirmed_holds_back_its_keys_later_messages_only() {
        let rows = [
            row(1, Some("a")),
            row(2, Some("b")),
            row(3, Some("a")),
            row(4, None),
            row(5, Some("b")),
        ];
        let outcomes = vec![
            Err(PublishError::new("timed out")),
            Ok(Confirmed::New),
            Ok(Confirmed::New),
            Ok(Confirmed::Duplicate),
        ];
        let settled = Settled::sort(&rows, outcomes);
        // 1 failed, so 3 (same key) waits; 5 had no outcome at all.
        assert_eq!(settled.stamp, vec![2, 4]);
        assert_eq!((settled.duplicates, settled.failures), (1, 2));
        assert_eq!(settled.error.unwrap().to_string(), "timed out");
    }
}
