//! The outbox's shard count changed: under every shard's lease at once, so that no relay
//! publishes a key on one shard while its next messages map to another.

use std::time::{Duration, Instant};

use guestlist_core::protocol::SLOTS;

use crate::Error;
use crate::backend::Backend;
use crate::backend::relay::shard_count;
use crate::outbox::Outbox;

/// How long the change holds the leases it takes while it waits for the rest.
const HOLD: Duration = Duration::from_secs(30);

impl<DB: Backend> Outbox<DB> {
    /// The table's shard count: how many relays can publish it at once.
    pub async fn shard_count(&self, pool: &sqlx::Pool<DB>) -> Result<u32, Error> {
        let read = async {
            let mut conn = pool.acquire().await?;
            DB::relay_shards(&mut conn, &self.relay).await
        };
        let rows = read.await.map_err(|err| self.error(err))?;
        Ok(shard_count(&rows))
    }

    /// Changes the table's shard count to `count` (1 to 65,536; a new table has 16): at most
    /// `count` relays publish it at once, each on its share of the shards.
    ///
    /// The change takes every shard's lease first, as a relay would, so that no relay publishes
    /// while a key's messages move to another shard: stop the relays (SIGTERM gives their shards
    /// back at once), change the count, start them again (`guestlist outbox shards N` does the
    /// same). It waits up to `wait` for leases still held (a relay that was killed holds its
    /// shards until its lease ends), then gives up with [`Error::ShardsHeld`] naming the relays,
    /// having changed nothing.
    ///
    /// From one shard to more (a table made before shards), the pending rows at slot 0 get
    /// their own slot on the change's transaction, so a key's older rows go where its newer
    /// ones do. A shard added back after a lowered count starts past every token given.
    pub async fn set_shards(
        &self,
        pool: &sqlx::Pool<DB>,
        count: u32,
        wait: Duration,
    ) -> Result<(), Error> {
        let count = count.clamp(1, SLOTS);
        let holder = format!("guestlist-shards-{}", std::process::id());
        let hold_ms = i64::try_from((wait + HOLD).as_millis()).unwrap_or(i64::MAX);
        let sql = &self.relay;
        let until = Instant::now() + wait;
        let mut conn = pool.acquire().await?;
        let mut held: Vec<(u32, i64)> = Vec::new();
        let outcome = loop {
            let rows = DB::relay_shards(&mut conn, sql)
                .await
                .map_err(|e| self.error(e))?;
            let current = shard_count(&rows);
            for row in &rows {
                let shard = u32::try_from(row.shard).unwrap_or(0);
                if held.iter().any(|(s, _)| *s == shard) {
                    continue;
                }
                let taken = DB::relay_take(&mut conn, sql, shard, current, &holder, hold_ms)
                    .await
                    .map_err(|e| self.error(e))?;
                if let Some(token) = taken {
                    held.push((shard, token));
                }
            }
            if held.len() == rows.len() {
                break Ok(());
            }
            if Instant::now() >= until {
                let mut holders: Vec<String> = rows
                    .iter()
                    .filter(|row| !held.iter().any(|(s, _)| i64::from(*s) == row.shard))
                    .filter_map(|row| row.holder.clone())
                    .collect();
                holders.sort();
                holders.dedup();
                break Err(Error::ShardsHeld {
                    table: self.table().to_string(),
                    holders,
                });
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        };
        let changed = match outcome {
            Ok(()) => DB::relay_reshard(&mut conn, sql, &held, count)
                .await
                .map_err(|e| self.error(e)),
            Err(err) => Err(err),
        };
        match changed {
            Ok(true) => {}
            outcome => {
                // Whatever failed, the leases taken go back at once: held, they would keep
                // every relay from publishing until they ran out.
                for (shard, token) in &held {
                    let _ = DB::relay_release(&mut conn, sql, *shard, *token).await;
                }
                return Err(outcome.err().unwrap_or_else(|| Error::ShardsHeld {
                    table: self.table().to_string(),
                    holders: vec!["a relay that took a shard mid-change".to_owned()],
                }));
            }
        }
        tracing::info!(table = %self.table(), shards = count, "outbox shard count changed");
        Ok(())
    }
}
