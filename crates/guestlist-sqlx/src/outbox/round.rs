//! One round of a relay: the lease, the last batch's outcomes settled (stamps, held keys, dead
//! letters), and the next batch read and sent while those stamps commit.

use std::time::Instant;
use tracing::Instrument;

use crate::Error;
use crate::backend::{Backend, Pending, PendingRow};
use crate::outbox::held::HeldKeys;
use crate::outbox::lease::Leases;
use crate::outbox::progress::{Progress, Published, Round};
use crate::outbox::publication::Publication;
use crate::outbox::relay::{Relay, Relayed};
use guestlist_core::protocol::Settled;
use guestlist_core::{OutboxMessage, Publish};

impl<DB: Backend, P: Publish> Relay<DB, P> {
    /// One round: the lease; the last round's outcomes settled (stamps, held keys, dead
    /// letters); the next batch of pending messages (unless `read_more` is false), published
    /// while the last one's stamps commit.
    pub(super) async fn round(
        &self,
        progress: &mut Progress,
        totals: &mut Relayed,
        read_more: bool,
    ) -> Result<Round, Error> {
        let sql = &self.outbox.relay;
        let lease_ms = i64::try_from(self.lease.as_millis()).unwrap_or(i64::MAX);
        let lease = match progress.lease.clone() {
            Some(lease) if lease.usable(Instant::now()) => lease,
            // No longer usable on this relay's clock (a slow renewal on a busy machine): a
            // renewal with its tokens keeps them when no other relay can have taken them, and
            // the batch in hand is stamped under the same tokens, not published again.
            Some(lease) if self.renew_held(progress, &lease, lease_ms).await? => lease,
            // A batch published under leases now gone stays pending: it goes again.
            Some(_) => {
                self.lost(progress).await;
                return Ok(Round::Standby);
            }
            None => {
                progress.carried = None;
                progress.held.clear();
                return Ok(Round::Standby);
            }
        };
        let held = lease.held();

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
            self.next_batch(progress, &lease, &settled, &dead).await?
        } else {
            Vec::new()
        };
        let (mut rows, mut messages) = self.checked(rows, &lease, &mut dead, &mut progress.held);
        // Reading the batch took time: a lease no longer usable publishes nothing more (the
        // rows stay pending), so that no other relay's take can come before this publish.
        // (The next round reads them again, under the lease as renewed.)
        let mut dropped = !rows.is_empty() && !lease.usable(Instant::now());
        if dropped {
            rows.clear();
            messages.clear();
        }

        if dropped && !had_carried && dead.is_empty() {
            self.renew_if_due(progress, &lease, lease_ms).await?;
            return Ok(Round::More);
        }
        if !had_carried && dead.is_empty() && rows.is_empty() {
            self.renew_if_due(progress, &lease, lease_ms).await?;
            if progress.held.is_empty() {
                progress.moved_at = Instant::now();
            }
            return Ok(Round::Idle);
        }

        // The broker confirms the new batch while the database stamps the last one: a span of
        // its own when there is something to stamp (a round's rows belong to many traces).
        let stamp_span = if settled.stamp.is_empty() && dead.is_empty() {
            tracing::Span::none()
        } else {
            tracing::info_span!(
                "guestlist.relay.stamp",
                otel.name = "stamp",
                guestlist.table = %self.outbox.table(),
                guestlist.rows = settled.stamp.len(),
                guestlist.dead_letters = dead.len(),
                guestlist.kept = tracing::field::Empty,
            )
        };
        let stamp = async {
            let asked = Instant::now();
            let mut conn = self.pool.acquire().await?;
            let stamp = (self.stamp, self.holder.as_str());
            let mut kept =
                DB::relay_stamp(&mut conn, sql, &held, lease_ms, &settled.stamp, stamp).await?;
            for (row, why) in &dead {
                if !kept {
                    break;
                }
                kept = DB::relay_bury(&mut conn, sql, &held, lease_ms, row.id, why).await?;
            }
            tracing::Span::current().record("guestlist.kept", kept);
            Ok::<_, sqlx::Error>((kept, asked))
        }
        .instrument(stamp_span);
        let (published, stamped) = tokio::join!(self.publish(&messages, &lease), stamp);
        let (kept, asked) = stamped.map_err(|e| self.error(e))?;
        if !kept {
            self.lost(progress).await;
            return Ok(Round::Standby);
        }
        if let Some(held) = progress.lease.as_mut() {
            held.renewed(published.renewed_at.map_or(asked, |at| at.max(asked)));
        }
        self.count(&settled, &dead, totals);
        if !settled.stamp.is_empty() || !dead.is_empty() {
            progress.moved_at = Instant::now();
        }
        if published.lost {
            self.lost(progress).await;
            return Ok(Round::Standby);
        }
        if published.unsent {
            // Nothing went out: the rows stay pending, and the next round reads them again
            // under the lease as renewed (or stands by).
            rows.clear();
            dropped = true;
        }
        self.resize(progress, &published);
        if let Some(err) = settled.outage {
            return Ok(Round::Outage(err));
        }
        if rows.is_empty() {
            return Ok(if dropped { Round::More } else { Round::Idle });
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
        lease: &Leases,
        settled: &Settled,
        dead: &[(PendingRow, String)],
    ) -> Result<Vec<PendingRow>, Error> {
        let mut rows = progress.held.due(progress.batch);
        // A head of a shard being given back waits for its next holder.
        rows.retain(|row| lease.publishes(row));
        let room = progress.batch.saturating_sub(rows.len());
        if room == 0 {
            return Ok(rows);
        }
        // Rows about to be stamped or buried are still pending until that commits.
        let mut exclude = settled.stamp.clone();
        exclude.extend(dead.iter().map(|(row, _)| row.id));
        exclude.extend(progress.held.rows());
        let shards = lease.publishing();
        if shards.is_empty() {
            // Every shard held is being given back: nothing more of theirs goes out.
            return Ok(rows);
        }
        let keys = progress.held.keys();
        let read = Pending {
            limit: i64::try_from(room).unwrap_or(i64::MAX),
            exclude: &exclude,
            held: &keys,
            count: lease.count,
            shards: &shards,
        };
        let mut conn = self.connection().await?;
        let pending = DB::relay_pending(&mut conn, &self.outbox.relay, read)
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
        lease: &Leases,
        dead: &mut Vec<(PendingRow, String)>,
        held: &mut HeldKeys,
    ) -> (Vec<PendingRow>, Vec<OutboxMessage>) {
        let mut kept = Vec::with_capacity(rows.len());
        let mut messages = Vec::with_capacity(rows.len());
        for row in rows {
            let message = message(&row, lease);
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
    pub(super) fn warn_if_stuck(&self, progress: &mut Progress, broker_down: bool) {
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

    /// Adds a settled batch to the totals and the metrics.
    fn count(&self, settled: &Settled, dead: &[(PendingRow, String)], totals: &mut Relayed) {
        let table = self.outbox.table().to_string();
        let published = settled.stamp.len() as u64;
        totals.published += published;
        totals.duplicates += settled.duplicates;
        totals.failures += settled.failures;
        totals.dead_lettered += dead.len() as u64;
        let relay = self.holder.clone();
        let labels = [("table", table), ("relay", relay)];
        metrics::counter!("guestlist_outbox_published_total", &labels).increment(published);
        metrics::counter!("guestlist_outbox_broker_duplicates_total", &labels)
            .increment(settled.duplicates);
        metrics::counter!("guestlist_outbox_publish_failures_total", &labels)
            .increment(settled.failures);
        metrics::counter!("guestlist_outbox_dead_lettered_total", &labels)
            .increment(dead.len() as u64);
    }
}

/// A pending row as the publisher sees it, fenced by its shard's lease in `lease`.
fn message(row: &PendingRow, lease: &Leases) -> OutboxMessage {
    let mut message = OutboxMessage::new(
        row.message_id.clone(),
        row.topic.clone(),
        row.payload.clone(),
    );
    message.ordering_key = row.ordering_key.clone();
    message.seq = row.seq;
    message.headers = OutboxMessage::decode_headers(row.headers.as_deref());
    message.shard = row.shard(lease.count);
    message.token = lease.token(message.shard).unwrap_or(0);
    message
}
