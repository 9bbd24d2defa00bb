//! The claim on the handler's own transaction: one commit per request, where the database has
//! a transaction-scoped lock to try (PostgreSQL's advisory lock; see
//! [`SqlKeyStore::claims_on_transaction`]).

use std::time::Duration;

use guestlist_core::{Attempt, Begin, Fingerprint, IdempotencyKey, Scope};
use sqlx::Transaction;

use crate::SqlKeyStore;
use crate::backend::Backend;
use crate::backend::keys::{ClaimLocked, Insert, Key};
use crate::keys::{BEGIN_ROUNDS, lease_ms, new_token};
use crate::{Error, backend};

/// Marks the claim after one that runs ([`SqlKeyStore::begin_locked`]), and undoes what came
/// after it ([`SqlKeyStore::keep_locked`]).
const SAVE_CLAIM: &str = "SAVEPOINT guestlist_claimed";
const BACK_TO_CLAIM: &str = "ROLLBACK TO SAVEPOINT guestlist_claimed";

/// What a retry is told to wait when the key's lock is held: the attempt holding it is running
/// now, and its lease says nothing about when it ends.
const LOCK_HELD_RETRY: Duration = Duration::from_secs(1);

impl<DB: Backend> SqlKeyStore<DB> {
    /// Whether this database can write a claim on the handler's own transaction
    /// ([`SqlKeyStore::begin_locked`]): PostgreSQL can (a transaction-scoped advisory lock
    /// stands in for the committed claim); SQLite and MySQL cannot.
    pub fn claims_on_transaction() -> bool {
        !<DB as backend::sealed::KeyStatements>::KEY_CLAIM_LOCKED.is_empty()
    }

    /// Claims `key` in `scope` on the handler's own transaction `tx`, so that the claim, the
    /// handler's writes and the stored response commit once, together. Only where
    /// [`SqlKeyStore::claims_on_transaction`] (PostgreSQL); elsewhere it refuses, sending
    /// nothing.
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
        tx: &mut DB::Connection,
        scope: &Scope,
        key: &IdempotencyKey,
        fingerprint: &Fingerprint,
        lease: Duration,
    ) -> Result<Begin, Error> {
        if !Self::claims_on_transaction() {
            return Err(Error::Database(sqlx::Error::Configuration(
                format!(
                    "{} has no transaction-scoped lock to claim a key on the handler's \
                     transaction; claim it with SqlKeyStore::begin (committed first) instead",
                    DB::BACKEND
                )
                .into(),
            )));
        }
        let key = &*self.key_at_rest(key);
        let lease_ms = lease_ms(lease);
        for _ in 0..BEGIN_ROUNDS {
            let token = new_token()?;
            let claim = ClaimLocked(Insert {
                key: Key::of(scope, key),
                fingerprint: fingerprint.as_bytes(),
                token: token as i64,
                lease_ms,
            });
            let claim = DB::fetch_one(tx, &*self.sql, claim)
                .await
                .map_err(|err| self.error(err))?;
            if !claim.held {
                // The holder may be an attempt running now, or a retry reading a stored
                // response: a stored response is replayed, anything else is in flight.
                let found = self
                    .settle_row(tx, scope, key, fingerprint, claim.row, None)
                    .await?;
                return Ok(found.unwrap_or(Begin::InFlight {
                    retry_after: LOCK_HELD_RETRY,
                }));
            }
            let begin = match claim.row {
                _ if claim.inserted => Some(Begin::Run {
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
                    DB::run_query(tx, sqlx::query(SAVE_CLAIM)).await?;
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
    pub async fn keep_locked(&self, mut tx: Transaction<'static, DB>) -> Result<(), Error> {
        DB::run_query(&mut tx, sqlx::query(BACK_TO_CLAIM)).await?;
        tx.commit().await.map_err(Error::from_commit)?;
        Ok(())
    }
}
