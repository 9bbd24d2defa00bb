//! `guestlist-bench http`: an axum handler that writes one row, under load on loopback, with
//! and without the Idempotency-Key layer, in one run.
//!
//! Figures, interleaved round by round (odd rounds reversed):
//! `unprotected` (the handler alone, its one INSERT on a pool connection: 1 statement),
//! `unprotected_tx` (the same INSERT inside BEGIN/COMMIT: 3 statements), `fresh` (the layer in
//! transactional mode, a new key on every request: the claim committed first, then BEGIN, the
//! row, the stored response and COMMIT: 5 statements, 2 commits), and `replay` (the layer
//! answering retries of stored keys: the claim's INSERT and a SELECT, no commit). On PostgreSQL
//! also `fresh_in_tx` and `replay_in_tx`: the same with `claim_in_transaction` (BEGIN, the locked
//! claim, the row, the stored response, COMMIT: 5 statements, 1 commit; a replay is BEGIN, the
//! claim, a SELECT and ROLLBACK). `replay_cached` and `replay_in_tx_cached` are the replays
//! with the layer's replay cache on: after a key's first replay, no statement at all.
//! `fresh_encrypted` is `fresh` with the stored bodies sealed at
//! rest (AES-256-GCM). `fresh_with_wait_on` is `fresh` with `in_flight_wait` set (no key
//! collides: its price on every request); `in_flight_wait` (see `waits`) how soon a waiter gets
//! the first attempt's answer. Guarded handlers answer 512 bytes of JSON. The load generator runs in the same process: 32 keep-alive
//! connections in a closed loop. The floors written by hand (`handwritten`, `atomic_phases`,
//! `same_guarantees_by_hand`, `replay_by_hand`) are in `by_hand`.
//!
//! Each layer writes its own key table, as each hand-written figure does, and a checkpoint runs
//! before each figure (outside its clock), so that no figure works on a table another grew or
//! flushes what another wrote. Figures a goal compares run side by side in a round, and their
//! ratio is the median of their ratios round by round (see `Report::quotient`); each figure's
//! CPU per request (the whole machine's, without a shared host's steal) is reported beside it.

mod by_hand;
mod takeover;
mod waits;
mod workload;

pub(crate) use takeover::hold_key;

use anyhow::Context;
use axum::Router;
use axum::body::Bytes;
use axum::extract::State;
use axum::http::StatusCode;
use axum::routing::post;
use guestlist::SqlKeyStore;
use guestlist::http::{IdempotencyLayer, IdempotentTx, ReplayCache};
use guestlist::sqlx::{self, Pool};

use self::workload::{HttpWorkload, KEYS, KEYS_IN_TX, KEYS_SEALED};
use crate::HttpArgs;
use crate::measure::Plan;
use crate::report::Report;
use crate::requests::{self, CONNECTIONS, STORED_KEYS, send, stored_key};

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Figure {
    Unprotected,
    UnprotectedTx,
    Fresh,
    FreshWaitOn,
    Replay,
    ReplayCached,
    FreshInTx,
    ReplayInTx,
    ReplayInTxCached,
    FreshSealed,
    Handwritten,
    AtomicPhases,
    SameGuaranteesByHand,
    ReplayByHand,
}

impl Figure {
    /// In the order each round runs them (reversed every other round): the figures the goals
    /// compare side by side, so that each round's pair runs close together.
    const ALL: [Figure; 14] = [
        Figure::ReplayCached,
        Figure::ReplayByHand,
        Figure::Replay,
        Figure::Unprotected,
        Figure::ReplayInTxCached,
        Figure::ReplayInTx,
        Figure::UnprotectedTx,
        Figure::Fresh,
        Figure::FreshWaitOn,
        Figure::FreshSealed,
        Figure::AtomicPhases,
        Figure::Handwritten,
        Figure::FreshInTx,
        Figure::SameGuaranteesByHand,
    ];

    fn in_tx(self) -> bool {
        matches!(
            self,
            Figure::FreshInTx | Figure::ReplayInTx | Figure::ReplayInTxCached
        )
    }

    fn by_hand(self) -> bool {
        matches!(
            self,
            Figure::Handwritten
                | Figure::AtomicPhases
                | Figure::SameGuaranteesByHand
                | Figure::ReplayByHand
        )
    }
}

impl requests::Figure for Figure {
    fn name(self) -> &'static str {
        match self {
            Figure::Unprotected => "unprotected",
            Figure::UnprotectedTx => "unprotected_tx",
            Figure::Fresh => "fresh",
            Figure::FreshWaitOn => "fresh_with_wait_on",
            Figure::Replay => "replay",
            Figure::ReplayCached => "replay_cached",
            Figure::FreshInTx => "fresh_in_tx",
            Figure::ReplayInTx => "replay_in_tx",
            Figure::ReplayInTxCached => "replay_in_tx_cached",
            Figure::FreshSealed => "fresh_encrypted",
            Figure::Handwritten => "handwritten",
            Figure::AtomicPhases => "atomic_phases",
            Figure::SameGuaranteesByHand => "same_guarantees_by_hand",
            Figure::ReplayByHand => "replay_by_hand",
        }
    }
}

/// The figures `named` asks for (all where it names none), or an error naming the figures.
fn chosen(named: &[String]) -> anyhow::Result<Vec<Figure>> {
    use requests::Figure as _;
    if named.is_empty() {
        return Ok(Figure::ALL.to_vec());
    }
    let chosen: Vec<Figure> = Figure::ALL
        .into_iter()
        .filter(|figure| named.iter().any(|name| name == figure.name()))
        .collect();
    if let Some(unknown) = named
        .iter()
        .find(|name| !chosen.iter().any(|figure| figure.name() == name.as_str()))
    {
        let known: Vec<&str> = Figure::ALL.iter().map(|figure| figure.name()).collect();
        anyhow::bail!(
            "no figure is called {unknown:?}; name some of: {}",
            known.join(", ")
        );
    }
    Ok(chosen)
}

pub(crate) async fn run(args: &HttpArgs) -> anyhow::Result<Report> {
    let common = &args.common;
    let figures = chosen(&args.figures)?;
    // The waits and the take-over, besides the figures, only in a whole run.
    let whole = args.figures.is_empty();
    let plan = Plan::of(common);
    let mut report = Report::default();
    let scratch = tempfile::tempdir()?;
    let sqlite_url = format!("sqlite:{}", scratch.path().join("bench-http.db").display());
    let mut urls = vec![common.database.clone()];
    if !common.database.starts_with("sqlite:") {
        urls.push(sqlite_url);
    }
    for url in urls {
        match url.split(':').next().unwrap_or_default() {
            "postgres" | "postgresql" => {
                let pool = connect::<sqlx::Postgres>(url.parse()?, &url).await?;
                measure_backend(pool.clone(), plan, &figures, &mut report).await?;
                if !whole {
                    continue;
                }
                let keys = SqlKeyStore::with_table(pool, workload::KEYS)?;
                let samples = if plan.rounds > 2 { 10 } else { 3 };
                takeover::measure(keys, &url, samples, &mut report).await?;
                let samples = if plan.rounds > 2 { 400 } else { 50 };
                waits::measure_redis(&common.redis, samples, &mut report).await?;
            }
            "mysql" | "mariadb" => {
                let url = url.replacen("mariadb:", "mysql:", 1);
                let pool = connect::<sqlx::MySql>(url.parse()?, &url).await?;
                measure_backend(pool, plan, &figures, &mut report).await?;
            }
            "sqlite" => {
                let options = guestlist::sqlite_options(&url)?;
                let pool = connect::<sqlx::Sqlite>(options, &url).await?;
                measure_backend(pool, plan, &figures, &mut report).await?;
            }
            _ => anyhow::bail!(
                "cannot tell the database from {url:?}: use postgres://, mysql:// or sqlite:"
            ),
        }
    }
    for backend in report
        .rows
        .iter()
        .map(|r| r.backend)
        .collect::<std::collections::BTreeSet<_>>()
    {
        for (name, over, under) in [
            ("fresh_vs_unprotected", "fresh", "unprotected"),
            ("fresh_vs_unprotected_tx", "fresh", "unprotected_tx"),
            ("replay_vs_fresh", "replay", "fresh"),
            ("fresh_in_tx_vs_unprotected", "fresh_in_tx", "unprotected"),
            ("replay_in_tx_vs_fresh_in_tx", "replay_in_tx", "fresh_in_tx"),
            ("fresh_encrypted_vs_fresh", "fresh_encrypted", "fresh"),
            ("fresh_with_wait_on_vs_off", "fresh_with_wait_on", "fresh"),
            ("fresh_in_tx_vs_handwritten", "fresh_in_tx", "handwritten"),
            (
                "fresh_in_tx_vs_same_guarantees_by_hand",
                "fresh_in_tx",
                "same_guarantees_by_hand",
            ),
            ("fresh_vs_atomic_phases", "fresh", "atomic_phases"),
            ("replay_vs_unprotected", "replay", "unprotected"),
            ("replay_vs_replay_by_hand", "replay", "replay_by_hand"),
            (
                "replay_by_hand_vs_unprotected",
                "replay_by_hand",
                "unprotected",
            ),
            ("replay_in_tx_vs_unprotected", "replay_in_tx", "unprotected"),
            (
                "replay_cached_vs_unprotected",
                "replay_cached",
                "unprotected",
            ),
            (
                "replay_in_tx_cached_vs_unprotected",
                "replay_in_tx_cached",
                "unprotected",
            ),
        ] {
            report.ratio(name, over, under, backend, CONNECTIONS);
        }
    }
    Ok(report)
}

async fn connect<DB: HttpWorkload>(
    options: <DB::Connection as sqlx::Connection>::Options,
    url: &str,
) -> anyhow::Result<Pool<DB>> {
    sqlx::pool::PoolOptions::new()
        .max_connections(DB::POOL)
        .connect_with(options)
        .await
        .with_context(|| format!("cannot connect to {url}; is the server running?"))
}

/// The handler without the layer: one row, on a pool connection.
async fn unprotected<DB: HttpWorkload>(State(pool): State<Pool<DB>>, body: Bytes) -> StatusCode {
    let mut conn = match pool.acquire().await {
        Ok(conn) => conn,
        Err(_) => return StatusCode::SERVICE_UNAVAILABLE,
    };
    match DB::insert(&mut conn, &body).await {
        Ok(()) => StatusCode::CREATED,
        Err(_) => StatusCode::SERVICE_UNAVAILABLE,
    }
}

/// The handler without the layer, its row in a transaction of its own (BEGIN, INSERT, COMMIT),
/// as a handler that writes more than one row runs.
async fn unprotected_tx<DB: HttpWorkload>(State(pool): State<Pool<DB>>, body: Bytes) -> StatusCode {
    let written = async {
        let mut tx = pool.begin().await?;
        DB::insert(&mut tx, &body).await?;
        tx.commit().await
    };
    match written.await {
        Ok(()) => StatusCode::CREATED,
        Err(_) => StatusCode::SERVICE_UNAVAILABLE,
    }
}

/// The same handler behind the layer: the row on the request's transaction, and a 512-byte
/// answer like a payment API's, so that storing (and sealing) it costs what it would.
async fn protected<DB: HttpWorkload>(
    mut tx: IdempotentTx<DB>,
    body: Bytes,
) -> (StatusCode, &'static str) {
    match DB::insert(&mut tx, &body).await {
        Ok(()) => (StatusCode::CREATED, ANSWER),
        Err(_) => (StatusCode::SERVICE_UNAVAILABLE, ""),
    }
}

/// What the protected handler answers: 512 bytes of JSON.
const ANSWER: &str = concat!(
    r#"{"id":"ch_3Pq8sK2eZvKYlo2C1a4bXyZt","object":"charge","amount":1200,"currency":"eur","#,
    r#""status":"succeeded","captured":true,"paid":true,"refunded":false,"livemode":false,"#,
    r#""description":"order 42","receipt_email":"alice@example.com","#,
    r#""payment_method":"pm_1Pq8sK2eZvKYlo2CxyzAbCdE","balance_transaction":"txn_3Pq8sK2eZvKYlo2C","#,
    r#""billing_details":{"name":"Alice Example","address":{"city":"Lyon","country":"FR","#,
    r#""line1":"1 rue de la Paix","postal_code":"69001"}},"metadata":{"order":"42"},"#,
    r#""created":1764460800,"outcome":{"network_status":"approved_by_network","type":"authorized"}}"#
);

/// The replay cache of the `_cached` figures: room for every stored key the replays retry.
fn replay_cache() -> ReplayCache {
    ReplayCache::new(
        100_000,
        64 * 1024 * 1024,
        std::time::Duration::from_secs(60),
    )
}

/// Serves `router` on a loopback port; returns its base URL.
async fn serve(router: Router) -> anyhow::Result<String> {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
    let base = format!("http://{}/payments", listener.local_addr()?);
    tokio::spawn(async move { axum::serve(listener, router).await });
    Ok(base)
}

async fn measure_backend<DB: HttpWorkload>(
    pool: Pool<DB>,
    plan: Plan,
    chosen: &[Figure],
    report: &mut Report,
) -> anyhow::Result<()> {
    eprintln!("measuring {} …", DB::LABEL);
    for table in [
        "DROP TABLE IF EXISTS bench_http_payments",
        "DROP TABLE IF EXISTS bench_http_keys",
        "DROP TABLE IF EXISTS bench_http_keys_in_tx",
        "DROP TABLE IF EXISTS bench_http_keys_sealed",
    ] {
        DB::exec(&pool, table).await?;
    }
    DB::exec(&pool, DB::CREATE).await?;
    let keys = SqlKeyStore::with_table(pool.clone(), KEYS)?;
    let keys_in_tx = SqlKeyStore::with_table(pool.clone(), KEYS_IN_TX)?;
    let keys_sealed = SqlKeyStore::with_table(pool.clone(), KEYS_SEALED)?;
    for store in [&keys, &keys_in_tx, &keys_sealed] {
        store.migrate().await?;
    }
    let plain = serve(
        Router::new()
            .route("/payments", post(unprotected::<DB>))
            .with_state(pool.clone()),
    )
    .await?;
    let plain_tx = serve(
        Router::new()
            .route("/payments", post(unprotected_tx::<DB>))
            .with_state(pool.clone()),
    )
    .await?;
    let guarded = serve(
        Router::new()
            .route("/payments", post(protected::<DB>))
            .layer(IdempotencyLayer::transactional(keys.clone())),
    )
    .await?;
    let sealing = guestlist::keys::Sealing::parse(&format!("bench:{}", "42".repeat(32)))?;
    let sealed = serve(
        Router::new()
            .route("/payments", post(protected::<DB>))
            .layer(IdempotencyLayer::transactional(keys_sealed.sealed(sealing))),
    )
    .await?;
    let waiting = serve(
        Router::new()
            .route("/payments", post(protected::<DB>))
            .layer(
                IdempotencyLayer::transactional(keys.clone())
                    .in_flight_wait(std::time::Duration::from_secs(5)),
            ),
    )
    .await?;
    let cached = serve(
        Router::new()
            .route("/payments", post(protected::<DB>))
            .layer(IdempotencyLayer::transactional(keys.clone()).replay_cache(replay_cache())),
    )
    .await?;
    let guarded_in_tx = match DB::claim_in_transaction(keys_in_tx) {
        Some(layer) => {
            let plain = Router::new()
                .route("/payments", post(protected::<DB>))
                .layer(layer.clone());
            let cached = Router::new()
                .route("/payments", post(protected::<DB>))
                .layer(layer.replay_cache(replay_cache()));
            Some((serve(plain).await?, serve(cached).await?))
        }
        None => None,
    };
    let by_hand = match DB::by_hand(pool.clone()).await? {
        Some(routers) => Some((
            serve(routers.handwritten).await?,
            serve(routers.phases).await?,
            serve(routers.same_guarantees).await?,
            serve(routers.replay).await?,
        )),
        None => None,
    };
    let figures: Vec<Figure> = chosen
        .iter()
        .copied()
        .filter(|figure| guarded_in_tx.is_some() || !figure.in_tx())
        .filter(|figure| by_hand.is_some() || !figure.by_hand())
        .collect();
    let (guarded_in_tx, cached_in_tx) = guarded_in_tx.unwrap_or_default();
    let (handwritten, phases, same_guarantees, replay_by_hand) = by_hand.unwrap_or_default();
    let client = reqwest::Client::builder()
        .pool_max_idle_per_host(CONNECTIONS)
        .build()?;
    // The keys the replay figures retry, in each table they are retried from.
    for n in 0..STORED_KEYS {
        send(&client, &guarded, Some(&format!("stored-{n}"))).await?;
        if !guarded_in_tx.is_empty() {
            send(&client, &guarded_in_tx, Some(&format!("stored-{n}"))).await?;
        }
    }

    let urls = (
        plain,
        plain_tx,
        guarded,
        guarded_in_tx,
        sealed,
        handwritten,
        phases,
        (
            cached,
            cached_in_tx,
            same_guarantees,
            replay_by_hand,
            waiting,
        ),
    );
    let settle_pool = pool.clone();
    requests::measure_settled(
        plan,
        &figures,
        DB::LABEL,
        move |figure, round, worker, n| {
            let (
                client,
                (
                    plain,
                    plain_tx,
                    guarded,
                    in_tx,
                    sealed,
                    handwritten,
                    phases,
                    (cached, cached_in_tx, same_guarantees, replay_by_hand, waiting),
                ),
            ) = (client.clone(), urls.clone());
            async move {
                let fresh = format!("{}r{round}-w{worker}-{n}", requests::Figure::name(figure));
                let stored = stored_key(worker, n);
                match figure {
                    Figure::Unprotected => send(&client, &plain, None).await,
                    Figure::UnprotectedTx => send(&client, &plain_tx, None).await,
                    Figure::Fresh => send(&client, &guarded, Some(&fresh)).await,
                    Figure::FreshWaitOn => send(&client, &waiting, Some(&fresh)).await,
                    Figure::Replay => send(&client, &guarded, Some(&stored)).await,
                    Figure::ReplayCached => send(&client, &cached, Some(&stored)).await,
                    Figure::FreshInTx => send(&client, &in_tx, Some(&fresh)).await,
                    Figure::ReplayInTx => send(&client, &in_tx, Some(&stored)).await,
                    Figure::ReplayInTxCached => send(&client, &cached_in_tx, Some(&stored)).await,
                    Figure::FreshSealed => send(&client, &sealed, Some(&fresh)).await,
                    Figure::Handwritten => send(&client, &handwritten, Some(&fresh)).await,
                    Figure::AtomicPhases => send(&client, &phases, Some(&fresh)).await,
                    Figure::SameGuaranteesByHand => {
                        send(&client, &same_guarantees, Some(&fresh)).await
                    }
                    Figure::ReplayByHand => send(&client, &replay_by_hand, Some(&stored)).await,
                }
            }
        },
        async || Ok(DB::exec(&settle_pool, DB::SETTLE).await?),
        report,
    )
    .await?;
    if chosen.len() == Figure::ALL.len() {
        let samples = if plan.rounds > 2 { 400 } else { 50 };
        waits::measure(keys, samples, report).await?;
    }
    Ok(())
}
