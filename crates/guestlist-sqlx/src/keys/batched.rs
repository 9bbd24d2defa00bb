//! Plain mode with the claims and stored responses of concurrent requests written together, in
//! rounds: one commit for many requests, and one writer.

use std::sync::Arc;
use std::time::Duration;

use guestlist_core::{
    Attempt, Completed, Fingerprint, IdempotencyKey, KeyClaim, KeyStore, Scope, ScopeUsage,
    StoredResponse,
};
use tokio::sync::{mpsc, oneshot};

use crate::backend::keys::{Complete, Insert, Key, WriteRound};
use crate::fencing::{lease_ms, new_token};
use crate::{Error, SqlKeyStore};

/// A database whose key writes [`BatchedKeyStore`] gathers into rounds: PostgreSQL (one
/// statement per round) and SQLite (one transaction per round, from one writer).
pub trait BatchBackend: WriteRound {}

impl<DB: WriteRound> BatchBackend for DB {}

/// Most requests one statement carries.
const MAX_BATCH: usize = 512;
/// Most bytes of stored answers one statement carries.
const ROUND_BYTES: usize = 16 * 1024 * 1024;
/// Requests waiting for a statement before senders wait too.
const QUEUE: usize = 2 * MAX_BATCH;

/// A plain-mode key store that writes the claims and the stored responses of concurrent
/// requests together: one commit for as many as arrived meanwhile.
///
/// Plain mode pays two commits per request (the claim before the work, the response after), and
/// at a few thousand requests per second those commits are the bound. This store queues them:
/// while one round runs, the claims and responses that arrive wait for the next round (up to
/// 512). On PostgreSQL a round is one statement. On SQLite it is one transaction written by
/// this store's one task, so that requests take the file's single write lock in the order they
/// came, instead of racing for it in the busy handler (where the unlucky wait for hundreds of
/// milliseconds). Each request still waits until its claim is durable before it runs, and
/// until its response is durable before it is answered: the guarantees are [`SqlKeyStore`]'s,
/// and a key already there takes [`SqlKeyStore::claim`](KeyStore::claim)'s path (replay, 409, 422, take-over) on
/// its own.
///
/// It serves the gateway; build it inside a Tokio runtime (it spawns the task that writes the
/// rounds, which ends when the last clone is dropped).
///
/// ```no_run
/// # async fn run(pool: sqlx::PgPool) -> Result<(), guestlist_sqlx::Error> {
/// use guestlist_sqlx::{BatchedKeyStore, SqlKeyStore};
///
/// let keys = SqlKeyStore::new(pool);
/// keys.migrate().await?;
/// let keys = BatchedKeyStore::new(keys); // a KeyStore for IdempotencyLayer::new
/// # Ok(()) }
/// ```
pub struct BatchedKeyStore<DB: BatchBackend> {
    store: SqlKeyStore<DB>,
    queue: mpsc::Sender<Item>,
}

crate::scaffold::clone_without_bound!(BatchedKeyStore<DB: BatchBackend> { store, queue });

impl<DB: BatchBackend> std::fmt::Debug for BatchedKeyStore<DB> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("BatchedKeyStore")
            .field("store", &self.store)
            .finish_non_exhaustive()
    }
}

/// What a round tells each of its requests: `true` when its row was inserted (a claim) or
/// completed (a response).
type Reply = oneshot::Sender<Result<bool, Arc<Error>>>;

/// One request's write, waiting for its round.
#[derive(Debug)]
enum Item {
    Claim(ClaimItem),
    Complete(CompleteItem),
}

/// A claim of a new key.
#[derive(Debug)]
struct ClaimItem {
    scope: String,
    key: String,
    fingerprint: Vec<u8>,
    token: i64,
    lease_ms: i64,
    /// The process holding the attempt, where it can be told gone.
    holder: Option<i64>,
    reply: Reply,
}

/// An attempt's stored response.
#[derive(Debug)]
struct CompleteItem {
    scope: String,
    key: String,
    token: i64,
    status: i32,
    headers: Vec<u8>,
    body: Option<Vec<u8>>,
    reply: Reply,
}

impl ClaimItem {
    /// The claim's insert.
    fn insert(&self) -> Insert<'_> {
        Insert {
            key: Key {
                scope: &self.scope,
                key: &self.key,
            },
            fingerprint: &self.fingerprint,
            token: self.token,
            lease_ms: self.lease_ms,
            holder: self.holder,
        }
    }
}

impl CompleteItem {
    /// The response's store.
    fn complete(&self) -> Complete<'_> {
        Complete {
            status: self.status,
            headers: &self.headers,
            body: self.body.as_deref(),
            key: Key {
                scope: &self.scope,
                key: &self.key,
            },
            token: self.token,
        }
    }
}

impl<DB: BatchBackend> BatchedKeyStore<DB> {
    /// Batches the claims and responses of `store`'s table. Call inside a Tokio runtime.
    pub fn new(store: SqlKeyStore<DB>) -> Self {
        let (queue, mut waiting) = mpsc::channel::<Item>(QUEUE);
        let rounds = store.clone();
        tokio::spawn(async move {
            let mut batch = Vec::new();
            while waiting.recv_many(&mut batch, MAX_BATCH).await > 0 {
                for part in by_bytes(std::mem::take(&mut batch)) {
                    round(&rounds, part).await;
                }
            }
        });
        Self { store, queue }
    }

    /// The store the rounds write to.
    pub fn inner(&self) -> &SqlKeyStore<DB> {
        &self.store
    }
}

/// Splits what waits into rounds of at most [`ROUND_BYTES`] of stored answers (a round with
/// only one answer may be larger), so that large bodies never make one statement too big.
fn by_bytes(batch: Vec<Item>) -> Vec<Vec<Item>> {
    let mut rounds = vec![Vec::new()];
    let mut bytes = 0;
    for item in batch {
        let size = match &item {
            Item::Claim(_) => 0,
            Item::Complete(c) => c.headers.len() + c.body.as_ref().map_or(0, Vec::len),
        };
        let current = rounds.last_mut().expect("never empty");
        if size > 0 && bytes + size > ROUND_BYTES && !current.is_empty() {
            rounds.push(Vec::new());
            bytes = 0;
        }
        bytes += size;
        rounds.last_mut().expect("never empty").push(item);
    }
    rounds
}

/// Writes one round and answers its requests. Claims go in `(scope, key)` order; a key claimed
/// twice in one round goes in once, and its repeats are told "not inserted" (they find the row
/// on their own). One round runs at a time, and every other statement on the table but the
/// purge touches a single row (the purge only rows older than any lease), so writers do not
/// wait on each other in a cycle. A claim whose request went
/// away before the round is dropped; one that went away during it is released again.
async fn round<DB: BatchBackend>(store: &SqlKeyStore<DB>, batch: Vec<Item>) {
    let (mut claims, mut completes) = (Vec::new(), Vec::new());
    for item in batch {
        match item {
            Item::Claim(claim) => claims.push(claim),
            Item::Complete(complete) => completes.push(complete),
        }
    }
    // A request that went away while it waited (its client hung up) claims nothing.
    claims.retain(|claim| !claim.reply.is_closed());
    claims.sort_by(|a, b| (&a.scope, &a.key).cmp(&(&b.scope, &b.key)));
    let mut repeats = Vec::new();
    let mut unique: Vec<ClaimItem> = Vec::with_capacity(claims.len());
    for claim in claims {
        match unique.last() {
            Some(last) if last.scope == claim.scope && last.key == claim.key => {
                repeats.push(claim);
            }
            _ => unique.push(claim),
        }
    }
    let inserts: Vec<Insert<'_>> = unique.iter().map(ClaimItem::insert).collect();
    let stored: Vec<Complete<'_>> = completes.iter().map(CompleteItem::complete).collect();
    let written = DB::write_round(store.pool(), &store.sql, &inserts, &stored)
        .await
        .map_err(|err| Arc::new(store.error(err)));
    let outcome = |token: i64| written.as_ref().map(|tokens| tokens.contains(&token));
    let mut orphans = Vec::new();
    for ClaimItem {
        scope,
        key,
        token,
        reply,
        ..
    } in unique
    {
        let answer = outcome(token);
        let inserted = matches!(answer, Ok(true));
        if reply.send(answer.map_err(Arc::clone)).is_err() && inserted {
            orphans.push((scope, key, token)); // claimed for a request that went away meanwhile
        }
    }
    let answers = completes
        .into_iter()
        .map(|c| (c.reply, outcome(c.token)))
        .chain(
            repeats
                .into_iter()
                .map(|c| (c.reply, outcome(c.token).map(|_| false))),
        );
    for (reply, answer) in answers {
        let _ = reply.send(answer.map_err(Arc::clone));
    }
    for (scope, key, token) in orphans {
        if let (Ok(scope), Ok(key)) = (Scope::new(scope), IdempotencyKey::new(key)) {
            let attempt = Attempt::new(1, token as u64);
            if let Err(err) = store.release(&scope, &key, attempt).await {
                tracing::warn!(error = %err, "cannot release the claim of a request that went away; it stays locked until its lease ends");
            }
        }
    }
}

impl<DB: BatchBackend> BatchedKeyStore<DB> {
    /// Queues a write for the next round and waits for its outcome.
    async fn through(&self, item: impl FnOnce(Reply) -> Item) -> Result<bool, Error> {
        let (reply, outcome) = oneshot::channel();
        let gone = || Error::Database(sqlx::Error::WorkerCrashed);
        self.queue.send(item(reply)).await.map_err(|_| gone())?;
        outcome.await.map_err(|_| gone())?.map_err(Error::Shared)
    }
}

impl<DB: BatchBackend> KeyStore for BatchedKeyStore<DB> {
    type Error = Error;

    async fn claim(
        &self,
        scope: &Scope,
        key: &IdempotencyKey,
        fingerprint: &Fingerprint,
        lease: Duration,
    ) -> Result<KeyClaim, Error> {
        let token = new_token()?;
        let stored_key = self.store.key_at_rest(key);
        let holder = self.store.holder().await;
        let inserted = self
            .through(|reply| {
                Item::Claim(ClaimItem {
                    scope: scope.as_str().to_owned(),
                    key: stored_key.as_str().to_owned(),
                    fingerprint: fingerprint.as_bytes().to_vec(),
                    token: token as i64,
                    lease_ms: lease_ms(lease),
                    holder,
                    reply,
                })
            })
            .await?;
        if inserted {
            return Ok(KeyClaim::Run {
                attempt: Attempt::new(1, token),
            });
        }
        // The key was there (or repeated in the batch): replay, 409, 422 or take-over.
        self.store.claim(scope, key, fingerprint, lease).await
    }

    async fn complete(
        &self,
        scope: &Scope,
        key: &IdempotencyKey,
        attempt: Attempt,
        response: &StoredResponse,
    ) -> Result<Completed, Error> {
        let key = &*self.store.key_at_rest(key);
        let body = self
            .store
            .body_at_rest(scope, key, response.body.stored_bytes())?;
        let stored = self
            .through(|reply| {
                Item::Complete(CompleteItem {
                    scope: scope.as_str().to_owned(),
                    key: key.as_str().to_owned(),
                    token: attempt.token() as i64,
                    status: i32::from(response.status),
                    headers: response.encode_headers(),
                    body,
                    reply,
                })
            })
            .await?;
        Ok(if stored {
            Completed::Stored
        } else {
            Completed::Fenced
        })
    }

    async fn release(
        &self,
        scope: &Scope,
        key: &IdempotencyKey,
        attempt: Attempt,
    ) -> Result<bool, Error> {
        self.store.release(scope, key, attempt).await
    }

    async fn usage(&self, scope: &Scope) -> Result<Option<ScopeUsage>, Error> {
        self.store.usage(scope).await.map(Some)
    }

    async fn in_flight_ended(&self, scope: &Scope, key: &IdempotencyKey) {
        self.store.in_flight_ended(scope, key).await;
    }

    async fn keep_for_lease(
        &self,
        scope: &Scope,
        key: &IdempotencyKey,
        attempt: Attempt,
    ) -> Result<(), Error> {
        self.store.keep_for_lease(scope, key, attempt).await
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn answer(bytes: usize) -> Item {
        let (reply, _) = oneshot::channel();
        Item::Complete(CompleteItem {
            scope: "s".to_owned(),
            key: format!("answer-{bytes}"),
            token: 1,
            status: 201,
            headers: Vec::new(),
            body: Some(vec![0; bytes]),
            reply,
        })
    }

    fn claim() -> Item {
        let (reply, _) = oneshot::channel();
        Item::Claim(ClaimItem {
            scope: "s".to_owned(),
            key: "claim".to_owned(),
            fingerprint: vec![0; 32],
            token: 2,
            lease_ms: 30_000,
            holder: None,
            reply,
        })
    }

    fn answer_bytes(round: &[Item]) -> usize {
        round
            .iter()
            .map(|item| match item {
                Item::Claim(_) => 0,
                Item::Complete(c) => c.body.as_ref().map_or(0, Vec::len),
            })
            .sum()
    }

    #[test]
    fn rounds_split_at_the_byte_limit_and_keep_every_item() {
        let mib = 1024 * 1024;
        let batch = vec![
            answer(10 * mib),
            claim(),
            answer(10 * mib),
            answer(20 * mib),
            claim(),
            answer(1),
        ];
        let rounds = by_bytes(batch);
        let sizes: Vec<usize> = rounds.iter().map(Vec::len).collect();
        assert_eq!(
            sizes,
            [2, 1, 2, 1],
            "claims ride along; answers split at 16 MiB"
        );
        for round in &rounds {
            let answers = round
                .iter()
                .filter(|item| matches!(item, Item::Complete(_)))
                .count();
            assert!(
                answer_bytes(round) <= ROUND_BYTES || answers == 1,
                "only a round holding a single large answer may pass the limit"
            );
        }
    }
}
