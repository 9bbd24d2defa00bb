//! How a relay keeps its leases: renewed while a round waits on the broker and between rounds,
//! renewed again once lapsed on its own clock, given up when it leaves a shard, and forgotten
//! when one is lost. (What a held lease is, [`super::Leases`], is the floor below.)

use std::time::Instant;

use guestlist_core::Publish;

use crate::Error;
use crate::backend::{Backend, Held};
use crate::outbox::progress::Progress;
use crate::outbox::relay::Relay;

use super::Leases;

impl<DB: Backend, P: Publish> Relay<DB, P> {
    /// Renews the leases every third of one while a round waits on the broker; returns once one
    /// is lost (never, while they hold), recording each renewal in `renewed`.
    ///
    /// Each time the relay's heartbeat goes first: a round that waits longer than a lease would
    /// otherwise count this relay out, and the others would take its share. The renewal is the
    /// last write of the beat, so that whoever sees a lease renewed knows the beat is done.
    pub(in crate::outbox) async fn keep_lease(
        &self,
        held: &Held,
        renewed: &std::sync::Mutex<Option<Instant>>,
    ) {
        let lease_ms = i64::try_from(self.lease.as_millis()).unwrap_or(i64::MAX);
        loop {
            tokio::time::sleep(self.lease / 3).await;
            let beat = async {
                let mut conn = self.pool.acquire().await?;
                DB::relay_heartbeat(&mut conn, &self.outbox.relay, &self.holder, lease_ms).await
            };
            if let Err(err) = beat.await {
                tracing::debug!(error = %err, "outbox relay could not beat mid-round");
            }
            let asked = Instant::now();
            match self.renew(held, lease_ms).await {
                Ok(true) => *renewed.lock().unwrap_or_else(|p| p.into_inner()) = Some(asked),
                Ok(false) => return,
                // The database is down: the lease runs out by itself; the stamp will tell.
                Err(err) => {
                    tracing::debug!(error = %err, "outbox relay could not renew its lease mid-round")
                }
            }
        }
    }

    /// Renews an idle relay's leases once a third of one has gone by.
    pub(in crate::outbox) async fn renew_if_due(
        &self,
        progress: &mut Progress,
        lease: &Leases,
        lease_ms: i64,
    ) -> Result<(), Error> {
        if lease.due(Instant::now()) && !self.renew_held(progress, lease, lease_ms).await? {
            self.lost(progress).await;
        }
        Ok(())
    }

    /// Renews the leases held now: `true` when the database still had each for this relay's
    /// token (nobody could have taken it), which makes them usable again, also once they had
    /// lapsed on this relay's clock.
    pub(in crate::outbox) async fn renew_held(
        &self,
        progress: &mut Progress,
        lease: &Leases,
        lease_ms: i64,
    ) -> Result<bool, Error> {
        let asked = Instant::now();
        let kept = self
            .renew(&lease.held(), lease_ms)
            .await
            .map_err(|e| self.error(e))?;
        match progress.lease.as_mut() {
            Some(held) if kept => {
                held.renewed(asked);
                Ok(true)
            }
            _ => Ok(false),
        }
    }

    /// Renews the leases of `held` for `lease_ms`; `false` when another relay holds one now.
    async fn renew(&self, held: &Held, lease_ms: i64) -> Result<bool, sqlx::Error> {
        let mut conn = self.pool.acquire().await?;
        DB::relay_renew(&mut conn, &self.outbox.relay, held, lease_ms).await
    }

    /// Gives the shards `held` up, so that other relays take them at once.
    pub(in crate::outbox) async fn release(&self, held: &Held) {
        if held.is_empty() {
            return;
        }
        let released = async {
            let mut conn = self.pool.acquire().await?;
            for (shard, token) in held {
                DB::relay_release(&mut conn, &self.outbox.relay, *shard, *token).await?;
            }
            Ok::<_, sqlx::Error>(())
        };
        if let Err(err) = released.await {
            tracing::warn!(table = %self.outbox.table(), error = %err,
                "outbox relay could not give its shards up; their leases expire on their own");
        }
    }

    /// Gives back the shards marked to leave once no row of theirs waits in the batch in hand
    /// (it is stamped first: a shard's next holder never publishes after an unstamped
    /// confirmation of this one).
    pub(in crate::outbox) async fn release_left(&self, progress: &mut Progress) {
        let Some(lease) = progress.lease.as_mut() else {
            return;
        };
        if !lease.is_leaving() {
            return;
        }
        let count = lease.count;
        if let Some(carried) = &progress.carried {
            let publishing = lease.publishing();
            let waiting = carried
                .rows
                .iter()
                .any(|row| !publishing.contains(&row.shard(count)));
            if waiting {
                return;
            }
        }
        let left = lease.take_leaving();
        if lease.len() == 0 {
            progress.lease = None;
        }
        self.release(&left).await;
    }

    /// Forgets the shards after one of their leases was lost (another relay took it, or the
    /// count changed), gives back those still held, and logs it: the keys held under them are
    /// found again by their next holders, and what was published unstamped goes again.
    pub(in crate::outbox) async fn lost(&self, progress: &mut Progress) {
        progress.carried = None;
        progress.held.clear();
        progress.coordinated_at = None;
        if let Some(lease) = progress.lease.take() {
            tracing::warn!(table = %self.outbox.table(), holder = %self.holder,
                shards = ?lease.shards(),
                "outbox relay lost a shard's lease to another relay; taking its share again");
            self.release(&lease.held()).await;
        }
    }
}
