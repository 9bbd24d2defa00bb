//! The relay: publishes the outbox's committed messages and stamps those the broker confirmed.

use std::future::Future;
use std::time::{Duration, Instant};

use guestlist_core::Backoff;

use crate::backend::{Backend, PendingRow};
use crate::outbox::held::HeldKeys;
use crate::outbox::lease::Lease;
use crate::outbox::publish::{Confirmed, OutboxMessage, Outcomes, Publish, PublishError};
use crate::outbox::settle::Settled;
use crate::outbox::{Outbox, Wake};
use crate::{Error, Health, keys::new_token};

/// Publishes an [`Outbox`]'s committed messages to a broker, and stamps each one published once
/// the broker has confirmed it.
///
/// - **Order.** Messages go out in the order they committed for each ordering key (the outbox
///   gives each key's messages their places as their transactions commit), in batches whose
///   publishes are pipelined and confirmed together, each sent while the batch before it is
///   stamped. Every confirmed message is stamped, whatever failed beside it.
/// - **Failures, told apart** ([`FailureKind`](guestlist_core::FailureKind)). A message the
///   broker refuses holds back its own ordering key: it is tried again alone, with a doubling
///   pause, while nothing after it on its key is sent and every other key flows; after
///   [`max_attempts`](Relay::max_attempts) refusals, or at once when the broker can never take
///   it ([`Publish::check`]), it moves to the outgoing dead letters (`<table>_dead`:
///   [`Outbox::dead_letters`]) with why, and its key moves on. A broker or database that is
///   down is an outage: nothing is counted against any message, the relay backs off as a
///   whole, reports it ([`Relay::health`]) and resumes by itself. Later messages of a key sent
///   in the same batch as its refused head may have reached the broker before it: they are
///   stamped and never sent again.
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
    backoff: (Duration, Duration),
    max_attempts: u32,
    confirm_timeout: Duration,
    health: Health,
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
    /// Messages moved to the outgoing dead letters (`<table>_dead`): refused for good, or
    /// refused [`max_attempts`](Relay::max_attempts) times.
    pub dead_lettered: u64,
}

/// Where a relay stands between rounds.
struct Progress {
    /// The lease, while this relay holds it.
    lease: Option<Lease>,
    /// The batch published last round, to be settled and stamped this round.
    carried: Option<Published>,
    /// Keys whose head the broker refused: nothing after the head goes out meanwhile.
    held: HeldKeys,
    /// Messages a round takes now: the setting, halved after a round that ran out of time.
    batch: usize,
    /// Whether the last round settled a confirmation: the broker answers again.
    confirmed: bool,
    /// When a message was last stamped or dead-lettered, or the outbox last found empty.
    moved_at: Instant,
    /// When the relay last warned that nothing moves.
    warned_at: Option<Instant>,
}

impl Progress {
    fn new(batch: usize) -> Self {
        Self {
            lease: None,
            carried: None,
            held: HeldKeys::default(),
            batch,
            confirmed: false,
            moved_at: Instant::now(),
            warned_at: None,
        }
    }
}

/// A batch the broker has answered for, waiting to be settled and stamped.
struct Published {
    rows: Vec<PendingRow>,
    outcomes: Vec<Option<Result<Confirmed, PublishError>>>,
}

/// What one round found.
enum Round {
    /// A batch went out: there may be more at once.
    More,
    /// Nothing more to publish now: wait for a commit, the poll, or a held key's turn.
    Idle,
    /// Another relay holds the lease.
    Standby,
    /// The broker or the way to it is down: back off as a whole.
    Outage(PublishError),
}

impl<DB: Backend, P: Publish> Relay<DB, P> {
    /// Messages per round unless set.
    pub const DEFAULT_BATCH: usize = 500;
    /// The lease unless set: how long a crashed relay keeps its successor waiting.
    pub const DEFAULT_LEASE: Duration = Duration::from_secs(10);
    /// How often an idle relay looks for messages without a notification, unless set.
    pub const DEFAULT_POLL: Duration = Duration::from_millis(500);
    /// Refusals of one message before it is dead-lettered, unless set.
    pub const DEFAULT_MAX_ATTEMPTS: u32 = 10;
    /// How long a round waits for the broker's confirmations, unless set.
    pub const DEFAULT_CONFIRM_TIMEOUT: Duration = Duration::from_secs(45);

    /// A relay publishing `outbox`'s messages, read from `pool`, with `publisher`.
    pub fn new(outbox: Outbox<DB>, pool: sqlx::Pool<DB>, publisher: P) -> Self {
        let holder = format!(
            "relay-{}-{:08x}",
            std::process::id(),
            new_token().unwrap_or_default() as u32
        );
        let health = Health::new("relay", outbox.table().as_str());
        Self {
            outbox,
            pool,
            publisher,
            batch: Self::DEFAULT_BATCH,
            lease: Self::DEFAULT_LEASE,
            poll: Self::DEFAULT_POLL,
            holder,
            backoff: (Backoff::DEFAULT_FIRST, Backoff::DEFAULT_MAX),
            max_attempts: Self::DEFAULT_MAX_ATTEMPTS,
            confirm_timeout: Self::DEFAULT_CONFIRM_TIMEOUT,
            health,
        }
    }

    /// At most `messages` per round (at least 1).
    pub fn batch(mut self, messages: usize) -> Self {
        self.batch = messages.max(1);
        self
    }

    /// The lease's length (at least 100 ms): the longest a crashed relay keeps a standing-by
    /// one waiting. A round that waits longer for its confirmations renews it meanwhile.
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

    /// The pause after a failure, doubling up to `max` (0.2 s to 5 s unless set): per ordering
    /// key for a message the broker refused, for the whole relay in an outage.
    pub fn backoff(mut self, first: Duration, max: Duration) -> Self {
        self.backoff = (first, max.max(first));
        self
    }

    /// How many times the broker may refuse one message before it moves to the outgoing dead
    /// letters (default 10, at least 1). A message the broker can never take (too large, an id
    /// it cannot carry: [`Publish::check`]) goes there at once; an outage counts against none.
    pub fn max_attempts(mut self, attempts: u32) -> Self {
        self.max_attempts = attempts.max(1);
        self
    }

    /// How long a round waits for the broker's confirmations (default 45 s). Those given by
    /// then are stamped; the rest count as an outage, and the next rounds take half as many
    /// messages until a round fits again.
    pub fn confirm_timeout(mut self, limit: Duration) -> Self {
        self.confirm_timeout = limit.max(Duration::from_millis(10));
        self
    }

    /// Whether the relay is publishing or waiting out an outage, for a service's `/readyz`.
    pub fn health(&self) -> Health {
        self.health.clone()
    }

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
    pub async fn run(&self, shutdown: impl Future<Output = ()>) -> Result<Relayed, Error> {
        let mut totals = Relayed::default();
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
        self.finish(progress, &mut totals).await;
        Ok(totals)
    }

    /// Publishes what is pending now, one round after another, until nothing more can go
    /// out; `None` when another relay holds the lease. For tests and one-off drains: a message
    /// the broker refused (its key held back) or an outage ends it with
    /// [`Error::Publish`], after everything else went out.
    pub async fn drain(&self) -> Result<Option<Relayed>, Error> {
        let mut totals = Relayed::default();
        let mut progress = Progress::new(self.batch);
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

    /// One round: the lease; the last round's outcomes settled (stamps, held keys, dead
    /// letters); the next batch of pending messages (unless `read_more` is false), published
    /// while the last one's stamps commit.
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
                progress.held.clear();
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

        // What the broker said of the last batch: known already, so that nothing read now is
        // sent behind a head that just failed.
        let carried = progress.carried.take();
        let had_carried = carried.is_some();
        let (settled, settled_rows) = match carried {
            Some(carried) => (Settled::sort(&carried.rows, carried.outcomes), carried.rows),
            None => (Settled::default(), Vec::new()),
        };
        progress.confirmed = !settled.confirmed.is_empty();
        let mut dead = self.hold_or_bury(&settled, &settled_rows, &mut progress.held);

        // An outage publishes nothing more this round: the relay backs off first.
        let rows = if read_more && settled.outage.is_none() {
            self.next_batch(progress, &settled, &dead).await?
        } else {
            Vec::new()
        };
        let (rows, messages) = self.checked(rows, &mut dead, &mut progress.held);

        if !had_carried && dead.is_empty() && rows.is_empty() {
            self.renew_if_due(progress, lease, lease_ms).await?;
            if progress.held.is_empty() {
                progress.moved_at = Instant::now();
            }
            return Ok(Round::Idle);
        }

        // The broker confirms the new batch while the database stamps the last one.
        let stamp = async {
            let asked = Instant::now();
            let mut conn = self.pool.acquire().await?;
            let mut kept =
                DB::relay_stamp(&mut conn, sql, lease.token, lease_ms, &settled.stamp).await?;
            for (row, why) in &dead {
                if !kept {
                    break;
                }
                kept = DB::relay_bury(&mut conn, sql, lease.token, lease_ms, row.id, why).await?;
            }
            Ok::<_, sqlx::Error>((kept, asked))
        };
        let (published, stamped) = tokio::join!(self.publish(&messages, lease), stamp);
        let (kept, asked) = stamped.map_err(|e| self.error(e))?;
        if !kept {
            return Ok(self.lost(progress, lease));
        }
        if let Some(held) = progress.lease.as_mut() {
            held.renewed(published.renewed_at.map_or(asked, |at| at.max(asked)));
        }
        self.count(&settled, &dead, totals);
        if !settled.stamp.is_empty() || !dead.is_empty() {
            progress.moved_at = Instant::now();
        }
        if published.lost {
            return Ok(self.lost(progress, lease));
        }
        self.resize(progress, &published);
        if let Some(err) = settled.outage {
            return Ok(Round::Outage(err));
        }
        if rows.is_empty() {
            return Ok(Round::Idle);
        }
        // More may be waiting; and even less than a batch is stamped at once, the next round.
        progress.carried = Some(Published {
            rows,
            outcomes: published.outcomes,
        });
        Ok(Round::More)
    }

    /// Holds back the keys whose head the broker refused, lets go of those whose head it
    /// confirmed, and returns the rows to dead-letter now, with why.
    fn hold_or_bury(
        &self,
        settled: &Settled,
        rows: &[PendingRow],
        held: &mut HeldKeys,
    ) -> Vec<(PendingRow, String)> {
        for &n in &settled.confirmed {
            held.release(&rows[n]);
        }
        let mut dead = Vec::new();
        for (n, err) in &settled.unpublishable {
            let row = &rows[*n];
            held.release(row);
            dead.push((row.clone(), format!("refused for good: {err}")));
        }
        for (n, err) in &settled.refused {
            let row = &rows[*n];
            let failures = held.failed(row, err.to_string(), self.backoff);
            if failures >= self.max_attempts {
                held.release(row);
                dead.push((
                    row.clone(),
                    format!("refused {failures} times, the last: {err}"),
                ));
            } else {
                tracing::warn!(table = %self.outbox.table(), message_id = %row.message_id,
                    ordering_key = row.ordering_key.as_deref().unwrap_or(""), topic = %row.topic,
                    failures, max_attempts = self.max_attempts, error = %err,
                    "the broker refused a message; its key waits and the rest flow");
            }
        }
        for (row, why) in &dead {
            tracing::error!(table = %self.outbox.table(), message_id = %row.message_id,
                ordering_key = row.ordering_key.as_deref().unwrap_or(""), topic = %row.topic,
                reason = %why,
                "moving a message to the outgoing dead letters; its key moves on");
        }
        dead
    }

    /// The next batch: the held heads whose turn has come, then the oldest pending rows of
    /// every key not held back.
    async fn next_batch(
        &self,
        progress: &Progress,
        settled: &Settled,
        dead: &[(PendingRow, String)],
    ) -> Result<Vec<PendingRow>, Error> {
        let mut rows = progress.held.due(progress.batch);
        let room = progress.batch.saturating_sub(rows.len());
        if room == 0 {
            return Ok(rows);
        }
        // Rows about to be stamped or buried are still pending until that commits.
        let mut exclude = settled.stamp.clone();
        exclude.extend(dead.iter().map(|(row, _)| row.id));
        exclude.extend(progress.held.rows());
        let keys = progress.held.keys();
        let limit = i64::try_from(room).unwrap_or(i64::MAX);
        let mut conn = self.connection().await?;
        let pending = DB::relay_pending(&mut conn, &self.outbox.relay, limit, &exclude, &keys)
            .await
            .map_err(|e| self.error(e))?;
        rows.extend(pending);
        Ok(rows)
    }

    /// Splits `rows` into those the broker could take, as messages, and those it never
    /// could, which join `dead` (their keys move on).
    fn checked(
        &self,
        rows: Vec<PendingRow>,
        dead: &mut Vec<(PendingRow, String)>,
        held: &mut HeldKeys,
    ) -> (Vec<PendingRow>, Vec<OutboxMessage>) {
        let mut kept = Vec::with_capacity(rows.len());
        let mut messages = Vec::with_capacity(rows.len());
        for row in rows {
            let message = message(&row);
            match self.publisher.check(&message) {
                Ok(()) => {
                    kept.push(row);
                    messages.push(message);
                }
                Err(err) => {
                    tracing::error!(table = %self.outbox.table(), message_id = %row.message_id,
                        ordering_key = row.ordering_key.as_deref().unwrap_or(""),
                        topic = %row.topic, reason = %err,
                        "moving a message the broker can never take to the outgoing dead letters; its key moves on");
                    held.release(&row);
                    dead.push((row, format!("refused for good: {err}")));
                }
            }
        }
        (kept, messages)
    }

    /// Halves the batch after a round that ran out of time waiting for confirmations, and
    /// grows it back after rounds that fit.
    fn resize(&self, progress: &mut Progress, published: &Publication) {
        if published.timed_out {
            let smaller = (progress.batch / 2).max(1);
            if smaller < progress.batch {
                tracing::warn!(table = %self.outbox.table(), batch = smaller,
                    timeout = ?self.confirm_timeout,
                    "the broker did not confirm a round in time; taking fewer messages a round");
            }
            progress.batch = smaller;
        } else if progress.batch < self.batch && !published.outcomes.is_empty() {
            progress.batch = (progress.batch * 2).min(self.batch);
        }
    }

    /// Warns, once a lease, while nothing moves although messages wait: names the causes.
    fn warn_if_stuck(&self, progress: &mut Progress, broker_down: bool) {
        let waited = progress.moved_at.elapsed();
        let stuck = !progress.held.is_empty() || broker_down || !self.health.is_ready();
        if !stuck || waited < self.lease {
            return;
        }
        if progress
            .warned_at
            .is_some_and(|at| at.elapsed() < self.lease)
        {
            return;
        }
        progress.warned_at = Some(Instant::now());
        let mut causes = progress.held.causes();
        causes.extend(self.health.cause());
        tracing::warn!(table = %self.outbox.table(), waited = ?waited,
            held_keys = progress.held.len(), causes = %causes.join("; "),
            "outbox relay: no message published or dead-lettered for a whole lease");
    }

    /// Publishes `messages` and waits for their confirmations, up to the confirm timeout,
    /// renewing the lease while it waits; the outcomes given by then are kept.
    async fn publish(&self, messages: &[OutboxMessage], lease: Lease) -> Publication {
        let mut publication = Publication::default();
        if messages.is_empty() {
            return publication;
        }
        let mut outcomes = Outcomes::with_capacity(messages.len());
        let renewed = std::sync::Mutex::new(None::<Instant>);
        let ended = {
            let publish = self.publisher.publish(messages, &mut outcomes);
            tokio::select! {
                () = publish => Ended::Confirmed,
                () = tokio::time::sleep(self.confirm_timeout) => Ended::TimedOut,
                () = self.keep_lease(lease, &renewed) => Ended::LeaseLost,
            }
        };
        publication.timed_out = ended == Ended::TimedOut;
        publication.lost = ended == Ended::LeaseLost;
        publication.renewed_at = *renewed.lock().unwrap_or_else(|p| p.into_inner());
        publication.outcomes = outcomes.into_slots(messages.len());
        publication
    }

    /// Renews the lease every third of it while a round waits on the broker; returns once it
    /// is lost (never, while it holds), recording each renewal in `renewed`.
    async fn keep_lease(&self, lease: Lease, renewed: &std::sync::Mutex<Option<Instant>>) {
        let lease_ms = i64::try_from(self.lease.as_millis()).unwrap_or(i64::MAX);
        loop {
            tokio::time::sleep(self.lease / 3).await;
            let asked = Instant::now();
            match self.renew(lease, lease_ms).await {
                Ok(true) => *renewed.lock().unwrap_or_else(|p| p.into_inner()) = Some(asked),
                Ok(false) => return,
                // The database is down: the lease runs out by itself; the stamp will tell.
                Err(err) => {
                    tracing::debug!(error = %err, "outbox relay could not renew its lease mid-round")
                }
            }
        }
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
        let kept = self
            .renew(lease, lease_ms)
            .await
            .map_err(|e| self.error(e))?;
        match progress.lease.as_mut() {
            Some(held) if kept => held.renewed(asked),
            _ => {
                self.lost(progress, lease);
            }
        }
        Ok(())
    }

    /// Renews `lease` for `lease_ms`; `false` when another relay holds it now.
    async fn renew(&self, lease: Lease, lease_ms: i64) -> Result<bool, sqlx::Error> {
        let mut conn = self.pool.acquire().await?;
        DB::relay_renew(&mut conn, &self.outbox.relay, lease.token, lease_ms).await
    }

    /// Adds a settled batch to the totals and the metrics.
    fn count(&self, settled: &Settled, dead: &[(PendingRow, String)], totals: &mut Relayed) {
        let table = self.outbox.table().to_string();
        let published = settled.stamp.len() as u64;
        totals.published += published;
        totals.duplicates += settled.duplicates;
        totals.failures += settled.failures;
        totals.dead_lettered += dead.len() as u64;
        metrics::counter!("guestlist_outbox_published_total", "table" => table.clone())
            .increment(published);
        metrics::counter!("guestlist_outbox_broker_duplicates_total", "table" => table.clone())
            .increment(settled.duplicates);
        metrics::counter!("guestlist_outbox_publish_failures_total", "table" => table.clone())
            .increment(settled.failures);
        metrics::counter!("guestlist_outbox_dead_lettered_total", "table" => table)
            .increment(dead.len() as u64);
    }

    /// Forgets a lease another relay took over, and the keys held under it (the new holder
    /// finds their heads pending), and logs it.
    fn lost(&self, progress: &mut Progress, lease: Lease) -> Round {
        progress.lease = None;
        progress.held.clear();
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

    /// Opens the connections the relay uses at once (the round's, the stamp's, the lease's
    /// mid-round renewal, the backlog reader's) before it publishes, so that none is opened
    /// mid-stream: on a busy machine a new connection (TLS, authentication, a server process)
    /// costs tens of milliseconds, and a thin stream's messages would wait for it.
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

/// What a batch's publish came to.
#[derive(Default)]
struct Publication {
    outcomes: Vec<Option<Result<Confirmed, PublishError>>>,
    /// The confirm timeout ran out first.
    timed_out: bool,
    /// The lease was lost while the round waited.
    lost: bool,
    /// The last time the lease was renewed while the round waited.
    renewed_at: Option<Instant>,
}

/// How the wait for a batch's confirmations ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Ended {
    Confirmed,
    TimedOut,
    LeaseLost,
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
        Ok((pending, oldest_ms)) => {
            let table = outbox.table().to_string();
            metrics::gauge!("guestlist_outbox_pending", "table" => table.clone())
                .set(pending as f64);
            metrics::gauge!("guestlist_outbox_oldest_pending_seconds", "table" => table)
                .set(oldest_ms.unwrap_or(0).max(0) as f64 / 1000.0);
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
