//! The claim on the handler's own transaction: one commit per request, where the database has
//! a transaction-scoped lock to try (PostgreSQL's advisory lock; see
//! [`SqlKeyStore::claims_on_transaction`]).

use std::time::Duration;

use guestlist_core::{Attempt, Fingerprint, IdempotencyKey, KeyClaim, Scope};
use sqlx::Transaction;

use crate::SqlKeyStore;
use crate::backend::Backend;
use crate::backend::keys::{ClaimLocked, Insert, Key, hold_lock, let_go_lock};
use crate::keys::{CLAIM_ROUNDS, lease_ms, new_token};
use crate::{Error, backend};

/// What a retry is told to wait when the key's lock is held: the attempt holding it is running
/// now, and its lease says nothing about when it ends.
const LOCK_HELD_RETRY: Duration = Duration::from_secs(1);

impl<DB: Backend> SqlKeyStore<DB> {
    /// Whether this database can write a claim on the handler's own transaction
    /// ([`SqlKeyStore::claim_locked`]): PostgreSQL can (a transaction-scoped advisory lock
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
    /// retry that finds it held gets [`KeyClaim::InFlight`] at once instead of queueing behind the
    /// uncommitted row. The lock and the row end with the transaction, so an attempt that dies
    /// (its process killed) leaves nothing behind: its writes roll back and the next retry runs
    /// at once. The lease bounds how long the transaction may sit idle
    /// (`idle_in_transaction_session_timeout`, set for this transaction only): an attempt that
    /// stalls past it, or whose connection went silent, has its session ended by PostgreSQL, and
    /// the retry after it runs. Rows left by [`SqlKeyStore::claim`](guestlist_core::KeyStore::claim)'s committed claims (another
    /// process in plain mode) are honoured as usual, leases included.
    ///
    /// `tx` must be inside a transaction (`BEGIN`): outside one, the lock and the claim would end
    /// with this very statement.
    pub async fn claim_locked(
        &self,
        tx: &mut DB::Connection,
        scope: &Scope,
        key: &IdempotencyKey,
        fingerprint: &Fingerprint,
        lease: Duration,
    ) -> Result<KeyClaim, Error> {
        if !Self::claims_on_transaction() {
            return Err(Error::Database(sqlx::Error::Configuration(
                format!(
                    "{} has no transaction-scoped lock to claim a key on the handler's \
                     transaction; claim it with SqlKeyStore::claim (committed first) instead",
                    DB::BACKEND
                )
                .into(),
            )));
        }
        let key = &*self.key_at_rest(key);
        let lease_ms = lease_ms(lease);
        for _ in 0..CLAIM_ROUNDS {
            let token = new_token()?;
            let claim = ClaimLocked(Insert {
                key: Key::of(scope, key),
                fingerprint: fingerprint.as_bytes(),
                token: token as i64,
                lease_ms,
                holder: None,
            });
            let claim = DB::fetch_one(tx, &*self.sql, claim)
                .await
                .map_err(|err| self.error(err))?;
            if !claim.held {
                // The holder may be an attempt running now, or a retry reading a stored
                // response: a stored response is replayed, anything else is in flight.
                let found = self.settle(tx, scope, key, fingerprint, None).await?;
                return Ok(found.unwrap_or(KeyClaim::InFlight {
                    retry_after: LOCK_HELD_RETRY,
                }));
            }
            let claimed = if claim.inserted {
                Some(KeyClaim::Run {
                    attempt: Attempt::new(1, token),
                })
            } else {
                // The key's row is there: a stored response, another request's, or an attempt
                // whose lease may have ended.
                self.settle(tx, scope, key, fingerprint, Some(lease_ms))
                    .await?
            };
            if let Some(claimed) = claimed {
                return Ok(claimed);
            }
        }
        Ok(KeyClaim::InFlight { retry_after: lease })
    }

    /// Ends an attempt claimed by [`SqlKeyStore::claim_locked`] (`attempt`, with `fingerprint`,
    /// on `tx`) whose work may have happened outside the database (a call that timed out): rolls
    /// back the handler's writes and commits the claim alone, so that the key stays locked for
    /// `lease` from now and a retry takes over after it. The key's lock is never let go in
    /// between: the session holds it too while the transaction rolls back and the claim is
    /// written again, so no retry can slip in.
    ///
    /// The happy path pays nothing for this (no savepoint after the claim): an attempt that
    /// keeps its key locked pays four more statements, once.
    pub async fn keep_locked(
        &self,
        mut tx: Transaction<'static, DB>,
        scope: &Scope,
        key: &IdempotencyKey,
        fingerprint: &Fingerprint,
        attempt: Attempt,
        lease: Duration,
    ) -> Result<(), Error> {
        if !Self::claims_on_transaction() {
            return Err(Error::Database(sqlx::Error::Configuration(
                format!(
                    "{} writes no claim on the handler's transaction; nothing to keep",
                    DB::BACKEND
                )
                .into(),
            )));
        }
        let key = &*self.key_at_rest(key);
        let at = Key::of(scope, key);
        DB::run(&mut tx, &*self.sql, hold_lock(at))
            .await
            .map_err(|err| self.error(err))?;
        let kept = async {
            DB::run_query(&mut tx, sqlx::query("ROLLBACK")).await?;
            DB::run_query(&mut tx, sqlx::query("BEGIN")).await?;
            let claim = Insert {
                key: at,
                fingerprint: fingerprint.as_bytes(),
                token: attempt.token() as i64,
                lease_ms: lease_ms(lease),
                // The key was kept locked because its work may have happened: it waits for the
                // lease even if this process dies.
                holder: None,
            };
            DB::key_insert(&mut tx, &self.sql, claim).await?;
            // Let go before the commit: a retry that takes the transaction's lock now waits on
            // the uncommitted row, and then finds it committed and in flight.
            DB::run(&mut tx, &*self.sql, let_go_lock(at)).await?;
            Ok::<(), sqlx::Error>(())
        }
        .await;
        if let Err(err) = kept {
            // The connection goes back to the pool: never with the session's lock on it.
            let _ = DB::run(&mut tx, &*self.sql, let_go_lock(at)).await;
            return Err(self.error(err));
        }
        tx.commit().await.map_err(Error::from_commit)?;
        Ok(())
    }
}
