//! What operators ask of the key table: one key's row, an eviction, the table's figures, and a
//! scope's usage.

use std::time::Duration;

use guestlist_core::{HeldKey, IdempotencyKey, KeyRecord, KeyState, KeyStats, Scope, ScopeUsage};

use super::SqlKeyStore;
use crate::Error;
use crate::backend::Backend;
use crate::backend::KeysSql;
use crate::backend::keys::{HeldKeyRow, KeyStatsRow, UsageRow};
use crate::backend::keys::{Key, evict, select};
use crate::backend::statement::Plain;

impl<DB: Backend> SqlKeyStore<DB> {
    /// Deletes the key whatever its state (an operator's eviction). `true` when a row went.
    pub async fn evict(&self, scope: &Scope, key: &IdempotencyKey) -> Result<bool, Error> {
        let key = &*self.key_at_rest(key);
        let mut conn = self.pool.acquire().await?;
        let evict = evict(Key::of(scope, key));
        let gone = DB::run(&mut conn, &*self.sql, evict)
            .await
            .map_err(|err| self.error(err))?;
        Ok(gone == 1)
    }

    /// Reads one key's row for an operator: who holds it, and whether a response is stored.
    /// `None` when the key is unknown (never used, evicted, or purged).
    pub async fn inspect(
        &self,
        scope: &Scope,
        key: &IdempotencyKey,
    ) -> Result<Option<KeyRecord>, Error> {
        let key = &*self.key_at_rest(key);
        let mut conn = self.pool.acquire().await?;
        let select = select(Key::of(scope, key));
        let row = DB::fetch_first(&mut conn, &*self.sql, select)
            .await
            .map_err(|err| self.error(err))?;
        Ok(row.map(|row| KeyRecord {
            attempt: u64::try_from(row.attempt).unwrap_or(0),
            fingerprint: hex::encode(&row.fingerprint),
            state: key_state(
                row.status.map(i64::from),
                row.body.as_ref().map(Vec::len),
                row.lease_left_ms,
            ),
        }))
    }

    /// The table's figures: rows, rows in flight, the oldest row's age, and the size on disk.
    pub async fn stats(&self) -> Result<KeyStats, Error> {
        let mut conn = self.pool.acquire().await?;
        let stats = Plain::reading(|sql: &KeysSql| &sql.stats, ());
        let row: KeyStatsRow = DB::fetch_one(&mut conn, &*self.sql, stats)
            .await
            .map_err(|err| self.error(err))?;
        let unsigned = |n: i64| u64::try_from(n).unwrap_or(0);
        Ok(KeyStats {
            rows: unsigned(row.rows),
            in_flight: unsigned(row.in_flight),
            oldest: row.oldest_ms.map(|ms| Duration::from_millis(unsigned(ms))),
            bytes: row.bytes.map(unsigned),
        })
    }

    /// The keys no response is stored for yet (in flight, or abandoned by an attempt that
    /// died), newest first, `limit` at most: for an operator to see who holds what, and for how
    /// long.
    pub async fn in_flight(&self, limit: u32) -> Result<Vec<HeldKey>, Error> {
        let mut conn = self.pool.acquire().await?;
        let list = Plain::reading(|sql: &KeysSql| &sql.in_flight, (i64::from(limit),));
        let rows: Vec<HeldKeyRow> = DB::fetch(&mut conn, &*self.sql, list)
            .await
            .map_err(|err| self.error(err))?;
        let unsigned = |n: i64| u64::try_from(n).unwrap_or(0);
        Ok(rows
            .into_iter()
            .map(|row| HeldKey {
                scope: row.scope,
                key: row.key,
                attempt: unsigned(row.attempt),
                state: key_state(None, None, row.lease_left_ms),
                age: Duration::from_millis(unsigned(row.age_ms.unwrap_or(0))),
            })
            .collect())
    }

    /// What `scope` holds: its keys in flight, and in all (one indexed count on the scope's
    /// range of the primary key).
    pub async fn usage(&self, scope: &Scope) -> Result<ScopeUsage, Error> {
        let mut conn = self.pool.acquire().await?;
        let usage = Plain::reading(|sql: &KeysSql| &sql.usage, (scope.as_str(),));
        let row: UsageRow = DB::fetch_one(&mut conn, &*self.sql, usage)
            .await
            .map_err(|err| self.error(err))?;
        let unsigned = |n: i64| u64::try_from(n).unwrap_or(0);
        Ok(ScopeUsage {
            in_flight: unsigned(row.in_flight),
            keys: unsigned(row.keys),
        })
    }
}

/// Where a key stands, from its row: a status means a stored response (of `body_bytes`, `None`
/// when too large to keep); without one, the lease left says in flight or abandoned.
pub(crate) fn key_state(
    status: Option<i64>,
    body_bytes: Option<usize>,
    lease_left_ms: Option<i64>,
) -> KeyState {
    match status {
        Some(status) => KeyState::Stored {
            status: u16::try_from(status).unwrap_or(0),
            body_bytes,
        },
        None => match lease_left_ms {
            Some(left) if left > 0 => KeyState::InFlight {
                lease_left: Duration::from_millis(left.unsigned_abs()),
            },
            _ => KeyState::Abandoned,
        },
    }
}
