//! PostgreSQL's claim on the handler's own transaction: one commit per request.

use std::time::Duration;

use guestlist_core::{Attempt, Begin, Fingerprint, IdempotencyKey, Scope};
use sqlx::{PgConnection, Postgres};

use crate::Error;
use crate::SqlKeyStore;
use crate::backend::KeyRow;
use crate::keys::{BEGIN_ROUNDS, lease_ms, new_token};

/// Marks the claim after one that runs ([`SqlKeyStore::begin_locked`]), and undoes what came
/// after it ([`SqlKeyStore::keep_locked`]).
const SAVE_CLAIM: &str = "SAVEPOINT guestlist_claimed";
const BACK_TO_CLAIM: &str = "ROLLBACK TO SAVEPOINT guestlist_claimed";

/// What the locked claim answers: whether it holds the key's lock, whether it inserted the
/// row, and the key's row as the statement began (all `NULL` when there was none).
type ClaimColumns = (
    bool,
    bool,
    Option<Vec<u8>>,
    Option<i32>,
    Option<Vec<u8>>,
    Option<Vec<u8>>,
    Option<i64>,
    Option<i64>,
    Option<i64>,
);

/// The claim's answer as (held, inserted, the row it read).
fn split(claim: ClaimColumns) -> (bool, bool, Option<KeyRow>) {
    let (held, inserted, fingerprint, status, headers, body, attempt, token, lease_left_ms) = claim;
    let row = fingerprint.map(|fingerprint| KeyRow {
        fingerprint,
        status,
        headers,
        body,
        attempt: attempt.unwrap_or(0),
        token: token.unwrap_or(0),
        lease_left_ms,
    });
    (held, inserted, row)
}

/// What a retry is told to wait when the key's lock is held: the attempt holding it is running
/// now, and its lease says nothing about when it ends.
const LOCK_HELD_RETRY: Duration = Duration::from_secs(1);

impl SqlKeyStore<Postgres> {
    /// Claims `key` in `scope` on the handler's own transaction `tx`, so that the claim, the
    /// handler's writes and the stored response commit once, together (PostgreSQL only).
    ///
    /// The claim first tries a transaction-scoped advisory lock on `(scope, key)`: a concurrent
    /// retry that finds it held gets [`Begin::InFlight`] at once instead of queueing behind the
    /// uncommitted row. The lock and the row end with the transaction, so an attempt that dies
    /// (its process killed) leaves nothing behind: its writes roll back and the next retry runs
    /// at once. The lease bounds how long the transaction may sit idle
    /// (`idle_in_transaction_session_timeout`, set for this transaction only): an attempt that
    /// stalls past it, or whose connection went silent, has its session ended by PostgreSQL, and
    /// the retry after it runs. Rows left by [`SqlKeyStore::begin`]'s committed claims (another
    /// process in plain mode) are honoured as usual, leases included.
    ///
    /// On [`Begin::Run`] the savepoint `guestlist_claimed` follows the claim, so that
    /// [`SqlKeyStore::keep_locked`] can undo the handler's writes and keep the claim.
    ///
    /// `tx` must be inside a transaction (`BEGIN`): outside one, the lock and the claim would end
    /// with this very statement.
    pub async fn begin_locked(
        &self,
        tx: &mut PgConnection,
        scope: &Scope,
        key: &IdempotencyKey,
        fingerprint: &Fingerprint,
        lease: Duration,
    ) -> Result<Begin, Error> {
        let key = &*self.key_at_rest(key);
        let lease_ms = lease_ms(lease);
        for _ in 0..BEGIN_ROUNDS {
            let token = new_token()?;
            let claim: ClaimColumns =
                sqlx::query_as(sqlx::AssertSqlSafe(self.sql.claim_locked.clone()))
                    .bind(scope.as_str())
                    .bind(key.as_str())
                    .bind(fingerprint.as_bytes())
                    .bind(token as i64)
                    .bind(lease_ms)
                    .fetch_one(&mut *tx)
                    .await
                    .map_err(|err| self.error(err))?;
            let (held, inserted, row) = split(claim);
            if !held {
                // The holder may be an attempt running now, or a retry reading a stored
                // response: a stored response is replayed, anything else is in flight.
                let found = self
                    .settle_row(tx, scope, key, fingerprint, row, None)
                    .await?;
                return Ok(found.unwrap_or(Begin::InFlight {
                    retry_after: LOCK_HELD_RETRY,
                }));
            }
            let begin = match row {
                _ if inserted => Some(Begin::Run {
                    attempt: Attempt::new(1, token),
                }),
                // Committed after the statement began: read it now.
                None => {
                    self.settle(tx, scope, key, fingerprint, Some(lease_ms))
                        .await?
                }
                row => {
                    self.settle_row(tx, scope, key, fingerprint, row, Some(lease_ms))
                        .await?
                }
            };
            if let Some(begin) = begin {
                if matches!(begin, Begin::Run { .. }) {
                    sqlx::query(SAVE_CLAIM).execute(&mut *tx).await?;
                }
                return Ok(begin);
            }
        }
        Ok(Begin::InFlight { retry_after: lease })
    }

    /// Ends an attempt claimed by [`SqlKeyStore::begin_locked`] whose work may have happened
    /// outside the database (a call that timed out): rolls back the handler's writes to the
    /// claim's savepoint and commits the claim alone, so that the key stays locked until its
    /// lease ends. The lock is never let go in between: no retry can slip in.
    pub async fn keep_locked(
        &self,
        mut tx: sqlx::Transaction<'static, Postgres>,
    ) -> Result<(), Error> {
        sqlx::query(BACK_TO_CLAIM).execute(&mut *tx).await?;
        tx.commit().await?;
        Ok(())
    }
}
