//! A relay's share of the outbox's shards: its heartbeat in the registry, the shards it gives
//! back once what it published on them is stamped, and the free ones it takes up to its share.

use std::time::Instant;

use guestlist_core::protocol::{ShardMoves, quota};

use crate::Error;
use crate::backend::Backend;
use crate::backend::relay::shard_count;
use crate::outbox::lease::Leases;
use crate::outbox::progress::Progress;
use crate::outbox::relay::{Relay, Relayed};
use guestlist_core::Publish;

impl<DB: Backend, P: Publish> Relay<DB, P> {
    /// Whether the relay should look at its share now: it holds nothing, lacks shards of its
    /// share (each poll), or a third of a lease went by since it last looked.
    pub(super) fn coordination_due(&self, progress: &Progress) -> bool {
        let held = progress.lease.as_ref().map_or(0, Leases::len);
        let every = if held < progress.quota || held == 0 {
            self.poll.min(self.lease / 3)
        } else {
            self.lease / 3
        };
        progress
            .coordinated_at
            .is_none_or(|at| at.elapsed() >= every)
    }

    /// Beats the relay's heartbeat, computes its fair share among the live relays, marks the
    /// shards past it to be given back (once the batch in hand is stamped) and takes free shards
    /// up to it.
    pub(super) async fn coordinate(
        &self,
        progress: &mut Progress,
        totals: &mut Relayed,
    ) -> Result<(), Error> {
        let sql = &self.outbox.relay;
        let lease_ms = i64::try_from(self.lease.as_millis()).unwrap_or(i64::MAX);
        let mut conn = self.connection().await?;
        let live = DB::relay_beat(&mut conn, sql, &self.holder, lease_ms)
            .await
            .map_err(|e| self.error(e))?;
        let rows = DB::relay_shards(&mut conn, sql)
            .await
            .map_err(|e| self.error(e))?;
        progress.coordinated_at = Some(Instant::now());
        let count = shard_count(&rows);
        if progress
            .lease
            .as_ref()
            .is_some_and(|lease| lease.count != count)
        {
            // The count changed under this relay: every lease was taken for it first, so what
            // it held is gone.
            self.lost(progress).await;
        }
        let held = progress
            .lease
            .as_ref()
            .map(Leases::shards)
            .unwrap_or_default();
        let free: Vec<u32> = rows
            .iter()
            .filter(|row| !row.held())
            .filter_map(|row| u32::try_from(row.shard).ok())
            .collect();
        let relays: Vec<(&str, u32)> = live
            .iter()
            .map(|relay| {
                let holds = rows
                    .iter()
                    .filter(|row| row.held() && row.holder.as_deref() == Some(relay));
                (relay.as_str(), holds.count() as u32)
            })
            .collect();
        let share = quota(&self.holder, &relays, count);
        progress.quota = share as usize;
        let moves = ShardMoves::plan(&self.holder, share, count, &held, &free);
        if moves.settled() {
            return Ok(());
        }
        if let Some(lease) = progress.lease.as_mut() {
            lease.leave(&moves.release);
            progress.held.retain(|row| lease.publishes(row));
        }
        self.release_left(progress).await;
        let mut taken = Vec::new();
        for shard in moves.take {
            let asked = Instant::now();
            let token = DB::relay_take(&mut conn, sql, shard, count, &self.holder, lease_ms)
                .await
                .map_err(|e| self.error(e))?;
            let Some(token) = token else { continue };
            totals.leases_taken += 1;
            taken.push(shard);
            match progress.lease.as_mut() {
                Some(lease) => lease.add(shard, token),
                None => {
                    progress.lease = Some(Leases::taken(count, shard, token, self.lease, asked))
                }
            }
        }
        if !taken.is_empty() || !moves.release.is_empty() {
            let holds = progress.lease.as_ref().map(Leases::publishing);
            tracing::info!(table = %self.outbox.table(), holder = %self.holder,
                relays = live.len(), shards = count, share, taken = ?taken,
                giving_back = ?moves.release, holds = ?holds.unwrap_or_default(),
                "outbox relay's share of the shards");
        }
        metrics::gauge!("guestlist_outbox_relay_shards",
            "table" => self.outbox.table().to_string(), "relay" => self.holder.clone())
        .set(progress.lease.as_ref().map_or(0, Leases::len) as f64);
        Ok(())
    }

    /// Leaves the registry, so that the other relays count their shares without this one at
    /// once.
    pub(super) async fn leave_registry(&self) {
        let left = async {
            let mut conn = self.pool.acquire().await?;
            DB::relay_leave(&mut conn, &self.outbox.relay, &self.holder).await
        };
        if let Err(err) = left.await {
            tracing::debug!(table = %self.outbox.table(), error = %err,
                "outbox relay could not leave the registry; its heartbeat ends on its own");
        }
    }
}
