//! The HTTP key table at production size, beside the inbox (`guestlist-bench inbox --rows N`).
//!
//! Fills a key table with N stored responses (UUID keys, scopes of 1,000 clients as the layer
//! names them from credentials, a 512-byte JSON body each, spread over the week), then measures
//! with 4 workers, on the loaded table against an empty one, interleaved round by round:
//! - `key_fresh`: a new key claimed (its own commit), then its response stored (a second
//!   commit), as the layer does in plain mode;
//! - `key_replay`: a retry of a key stored in an earlier round, answered by one read by primary
//!   key.
//!
//! And the key table's bytes per row.

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use anyhow::Context;
use guestlist::sqlx::Pool;
use guestlist::{
    IdempotencyKey, KeyStore, SqlKeyStore,
    keys::{Completed, Fingerprint, KeyClaim, Scope, StoredBody, StoredResponse},
};

use super::preload::{BODY_BYTES, CLIENTS, Preload, Shape, in_chunks};
use crate::measure::{Plan, load, median_of};
use crate::report::{Report, Row};

const LOADED_TABLE: &str = "bench_scale_keys";
const EMPTY_TABLE: &str = "bench_scale_keys_empty";
const WORKERS: usize = 4;
const LEASE: Duration = Duration::from_secs(30);

/// The figures measured on the loaded and the empty table.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Figure {
    FreshEmpty,
    FreshLoaded,
    ReplayEmpty,
    ReplayLoaded,
}

impl Figure {
    const ALL: [Figure; 4] = [
        Figure::FreshEmpty,
        Figure::FreshLoaded,
        Figure::ReplayEmpty,
        Figure::ReplayLoaded,
    ];

    fn name(self) -> &'static str {
        match self {
            Figure::FreshEmpty => "key_fresh_empty",
            Figure::FreshLoaded => "key_fresh_loaded",
            Figure::ReplayEmpty => "key_replay_empty",
            Figure::ReplayLoaded => "key_replay_loaded",
        }
    }

    fn loaded(self) -> bool {
        matches!(self, Figure::FreshLoaded | Figure::ReplayLoaded)
    }

    fn fresh(self) -> bool {
        matches!(self, Figure::FreshEmpty | Figure::FreshLoaded)
    }
}

/// One table and the keys this run stored in it, for the replays.
struct Table<DB: Preload> {
    store: SqlKeyStore<DB>,
    stored: Mutex<Vec<(Scope, IdempotencyKey)>>,
}

/// The response every fresh key stores.
fn response() -> StoredResponse {
    StoredResponse {
        status: 201,
        headers: vec![("content-type".to_owned(), b"application/json".to_vec())],
        body: StoredBody::Bytes(vec![b'x'; BODY_BYTES]),
    }
}

/// The fingerprint of every request: the replays ask with the one the key was stored with.
fn fingerprint() -> Fingerprint {
    Fingerprint::builder("POST", "/orders").body(b"{\"sku\":\"bench\"}")
}

impl<DB: Preload> Table<DB> {
    fn new(pool: &Pool<DB>, name: &str) -> anyhow::Result<Self> {
        Ok(Self {
            store: SqlKeyStore::with_table(pool.clone(), name)?,
            stored: Mutex::new(Vec::new()),
        })
    }

    /// A new key claimed and its response stored.
    async fn fresh(&self, n: u64) -> anyhow::Result<u64> {
        let scope = Scope::from_credentials(format!("client {}", n % CLIENTS).as_bytes());
        let key = IdempotencyKey::new(Shape::Uuid.random_id(n))?;
        let begin = self
            .store
            .claim(&scope, &key, &fingerprint(), LEASE)
            .await?;
        let KeyClaim::Run { attempt } = begin else {
            anyhow::bail!("{key}: a random key was not new: {begin:?}");
        };
        let completed = self
            .store
            .complete(&scope, &key, attempt, &response())
            .await?;
        anyhow::ensure!(completed == Completed::Stored, "{key}: {completed:?}");
        self.stored.lock().unwrap().push((scope, key));
        Ok(1)
    }

    /// A retry of a key stored earlier in this run.
    async fn replay(&self) -> anyhow::Result<u64> {
        let (scope, key) = {
            let stored = self.stored.lock().unwrap();
            anyhow::ensure!(!stored.is_empty(), "no key stored yet to replay");
            stored[fastrand::usize(..stored.len())].clone()
        };
        let begin = self
            .store
            .claim(&scope, &key, &fingerprint(), LEASE)
            .await?;
        anyhow::ensure!(
            matches!(begin, KeyClaim::Replay(_)),
            "{key}: a stored key did not replay: {begin:?}"
        );
        Ok(1)
    }
}

/// Loads a key table with `rows` rows, measures fresh keys and replays on it against an empty
/// table, and records its bytes per row; drops both tables after.
pub(super) async fn measure<DB: Preload>(
    pool: &Pool<DB>,
    plan: Plan,
    rows: u64,
    report: &mut Report,
) -> anyhow::Result<()> {
    let loaded = Arc::new(Table::new(pool, LOADED_TABLE)?);
    let empty = Arc::new(Table::new(pool, EMPTY_TABLE)?);
    for table in [LOADED_TABLE, EMPTY_TABLE] {
        DB::exec(pool, format!("DROP TABLE IF EXISTS {table}")).await?;
    }
    loaded.store.migrate().await?;
    empty.store.migrate().await?;
    fill(pool, rows).await?;
    DB::exec(pool, format!("{} {LOADED_TABLE}", DB::ANALYZE)).await?;
    let stats = loaded.store.stats().await?;
    let bytes_per_row = stats.bytes.map(|b| b as f64 / stats.rows.max(1) as f64);
    eprintln!(
        "  {LOADED_TABLE}: {} rows, {:.0} bytes a row",
        stats.rows,
        bytes_per_row.unwrap_or(f64::NAN)
    );

    let mut samples: Vec<(Figure, f64)> = Vec::new();
    for round in 0..plan.rounds {
        for figure in plan.order(round, &Figure::ALL) {
            // Round 0 runs the fresh figures first, so every replay finds stored keys.
            let table = if figure.loaded() { &loaded } else { &empty }.clone();
            let measured = load(WORKERS, plan.each, move |_worker, n| {
                let table = table.clone();
                async move {
                    if figure.fresh() {
                        table.fresh(n).await
                    } else {
                        table.replay().await
                    }
                }
            })
            .await?;
            eprintln!(
                "  {:<18} round {round}  {:>9.0} keys/s",
                figure.name(),
                measured.per_sec
            );
            samples.push((figure, measured.per_sec));
        }
    }
    for figure in Figure::ALL {
        report.rows.push(Row {
            name: figure.name().to_owned(),
            backend: DB::LABEL,
            workers: WORKERS,
            batch: 1,
            per_sec: median_of(&samples, &figure),
            unit: "keys/s",
            latency: None,
        });
    }
    let n = super::ratios::rows_label(rows);
    for (what, over, under) in [
        ("fresh", Figure::FreshLoaded, Figure::FreshEmpty),
        ("replay", Figure::ReplayLoaded, Figure::ReplayEmpty),
    ] {
        let ratio = report.quotient(over.name(), under.name(), DB::LABEL, WORKERS);
        report.record(&format!("key_{what}_{n}_vs_empty_{}", DB::LABEL), ratio);
    }
    if let Some(bytes) = bytes_per_row {
        report.ratios.insert(
            format!("key_bytes_per_row_{n}_{}", DB::LABEL),
            bytes.round(),
        );
    }
    for table in [LOADED_TABLE, EMPTY_TABLE] {
        DB::exec(pool, format!("DROP TABLE IF EXISTS {table}")).await?;
    }
    Ok(())
}

/// Fills the loaded key table with `rows` stored responses, a chunk per statement.
async fn fill<DB: Preload>(pool: &Pool<DB>, rows: u64) -> anyhow::Result<()> {
    let started = Instant::now();
    let chunk = |from, to| DB::key_chunk(LOADED_TABLE, from, to, rows);
    in_chunks(pool, rows, chunk, |_| {})
        .await
        .with_context(|| format!("filling {LOADED_TABLE}"))?;
    let secs = started.elapsed().as_secs_f64();
    eprintln!(
        "  filled {LOADED_TABLE} with {rows} keys in {secs:.1} s ({:.0} rows/s)",
        rows as f64 / secs
    );
    Ok(())
}
