//! Steps of a request behind the HTTP layer's transactional mode (DESIGN 4d): the journal of a
//! key's finished steps in `<keys>_steps`, held by the attempt that holds the key.
//!
//! The key's lease already keeps its attempts apart, so the run of a key's steps is no lease of
//! its own: each attempt seats itself as the run under its own fencing token, which fences the
//! attempt it took over from (that one journals nothing more, and its answer is fenced by the
//! key). The run row is marked with the request's fingerprint: a key released after a failure
//! and reused for another request does not replay the first one's steps.

use std::sync::Arc;

use guestlist_core::{Attempt, Fingerprint, IdempotencyKey, Scope};

use super::SqlKeyStore;
use crate::Error;
use crate::backend::Backend;
use crate::steps::{
    DEFAULT_STEP_LEASE, DEFAULT_STEP_RETRY, RunOf, Steps, forget, read_journal, seat_run,
};

impl<DB: Backend> SqlKeyStore<DB> {
    /// The steps of the request that holds `key` in `scope` as `attempt`: a handler behind the
    /// layer's transactional mode runs its named steps through them (the HTTP layer's
    /// `IdempotentSteps` hands them over). A step an earlier attempt of the same request
    /// finished (one that crashed, timed out or answered 5xx) returns its journaled result and
    /// does not run; external steps carry `scope:key/<step>` downstream.
    ///
    /// [`Error::RunTakenOver`] where `attempt` no longer holds the key, and
    /// [`Error::JournalOfAnotherRequest`] where the key was used before for another request
    /// whose steps ran partway.
    pub async fn steps(
        &self,
        scope: &Scope,
        key: &IdempotencyKey,
        fingerprint: &Fingerprint,
        attempt: Attempt,
    ) -> Result<Steps<DB>, Error> {
        let of = Arc::new(self.run_of(scope, key));
        let lease_ms = i64::try_from(DEFAULT_STEP_LEASE.as_millis()).unwrap_or(i64::MAX);
        let token = attempt.token() as i64;
        let mut conn = self.pool().acquire().await?;
        let mark = fingerprint.to_hex();
        if !seat_run::<DB>(&mut conn, &self.steps, &of, &mark, token, lease_ms).await? {
            return Err(Error::JournalOfAnotherRequest {
                scope: scope.digest(),
            });
        }
        let Some(journal) = read_journal::<DB>(&mut conn, &self.steps, &of).await? else {
            // The key has its answer: another attempt took it over and finished.
            return Err(Error::RunTakenOver {
                handler: of.owner.clone(),
                message_id: of.id.clone(),
            });
        };
        Ok(Steps {
            pool: self.pool().clone(),
            sql: Arc::clone(&self.steps),
            run: of,
            token,
            lease_ms,
            retry_for: DEFAULT_STEP_RETRY,
            journal,
            place: 0,
            group: None,
        })
    }

    /// Forgets the journal of `key`'s steps on `conn`: the transaction that stores the key's
    /// answer, so that both commit together.
    pub async fn forget_steps(
        &self,
        conn: &mut DB::Connection,
        scope: &Scope,
        key: &IdempotencyKey,
    ) -> Result<(), Error> {
        forget::<DB>(conn, &self.steps, &self.run_of(scope, key)).await
    }

    /// Whose steps a request's are: its scope and its key as stored, carrying `scope:key`.
    fn run_of(&self, scope: &Scope, key: &IdempotencyKey) -> RunOf {
        RunOf {
            owner: scope.as_str().to_owned(),
            id: self.key_at_rest(key).as_str().to_owned(),
            parent: Arc::from(scope.qualify(key)),
        }
    }
}
