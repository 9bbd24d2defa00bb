//! `guestlist gateway`: Stripe-style idempotency in front of any HTTP service, and exactly-once
//! delivery of incoming webhooks.
//!
//! A reverse proxy with guestlist's Idempotency-Key layer in plain mode: the first request with
//! a key is forwarded and its answer stored; retries get the stored answer, 409 while the first
//! runs, 422 for a key reused with another request. Keys live in SQLite by default, or in
//! PostgreSQL, MySQL/MariaDB or Redis, which several gateways can share.

pub(crate) mod args;
mod lingering;
pub(crate) mod parse;
mod proxy;
mod server;
pub(crate) mod settings;

use std::sync::Arc;

use anyhow::Context;
use axum::Router;
use guestlist::http::{IdempotencyLayer, Plain, ReplayCache};
use guestlist::sqlx::{self, Pool};
use guestlist::{
    Backend, KeyStore, Purger, Retention, SqlKeyStore,
    keys::{BatchedKeyStore, Scope},
};
use tokio::sync::watch;

use self::args::GatewayArgs;
use self::parse::ScopeFrom;
use self::proxy::Proxy;
use self::settings::Settings;
use crate::database::{self, with_pool};
use crate::ops;

/// Connections the gateway keeps to its key store.
const POOL_SIZE: u32 = 16;

pub(crate) async fn run(args: GatewayArgs) -> anyhow::Result<()> {
    let settings = Settings::resolve(args)?;
    // Before anything can take a request, so that a SIGTERM is never the default (instant) one.
    let terminated = crate::signal::Terminated::install()?;
    if database::is_redis(&settings.database) {
        return serve_redis(settings, terminated).await;
    }
    let pool = database::connect(&settings.database, POOL_SIZE).await?;
    with_pool!(pool, |pool| serve_sql(pool, settings, terminated).await)
}

/// The key store behind the gateway's replay cache, per database.
trait GatewayKeys: Backend {
    /// What the layer calls.
    type Keys: KeyStore;
    /// Wraps the table's store.
    fn keys(store: SqlKeyStore<Self>) -> Self::Keys;
}

/// PostgreSQL batches the claims and answers of concurrent requests: one commit for many.
impl GatewayKeys for sqlx::Postgres {
    type Keys = BatchedKeyStore<Self>;
    fn keys(store: SqlKeyStore<Self>) -> Self::Keys {
        BatchedKeyStore::new(store)
    }
}

/// SQLite has one write lock: one writer task takes it for a round of claims and answers, in
/// the order requests came, instead of every request racing for it in the busy handler.
impl GatewayKeys for sqlx::Sqlite {
    type Keys = BatchedKeyStore<Self>;
    fn keys(store: SqlKeyStore<Self>) -> Self::Keys {
        BatchedKeyStore::new(store)
    }
}

/// MySQL has no `RETURNING` to tell a batch's new rows from the ones already there.
impl GatewayKeys for sqlx::MySql {
    type Keys = SqlKeyStore<Self>;
    fn keys(store: SqlKeyStore<Self>) -> Self::Keys {
        store
    }
}

/// How long keys are kept, checked against the lease.
fn retention(settings: &Settings) -> anyhow::Result<Retention> {
    Retention::new(settings.retention, settings.lease).with_context(|| {
        format!(
            "--retention must be at least the lease ({}): a key must outlive its own attempt",
            humantime::format_duration(settings.lease)
        )
    })
}

/// The gateway with its keys in a SQL table, purged every five minutes.
async fn serve_sql<DB: GatewayKeys>(
    pool: Pool<DB>,
    settings: Settings,
    terminated: crate::signal::Terminated,
) -> anyhow::Result<()> {
    // A gateway that dies leaves its keys to their lease: the upstream may still be running the
    // request it forwarded, and a retry forwarded at once could run it twice.
    let mut keys = SqlKeyStore::with_table(pool.clone(), &settings.table)?.lease_only();
    if let Some(sealing) = &settings.sealing {
        tracing::info!(
            key_id = sealing.sealing_key_id(),
            "stored response bodies are sealed"
        );
        keys = keys.sealed(sealing.clone());
    }
    if let Some(hashing) = &settings.key_hashing {
        tracing::info!("keys are stored as keyed hashes");
        keys = keys.hashing_keys(hashing.clone());
    }
    keys.migrate().await.with_context(|| {
        format!(
            "cannot create the key table {} in {}",
            settings.table,
            database::redact(&settings.database)
        )
    })?;
    let purger = Purger::new(pool.clone(), &keys, retention(&settings)?)
        .every(std::time::Duration::from_secs(300))
        .spawn();
    let served = serve(DB::keys(keys), pool, &settings, terminated).await;
    purger.shutdown().await;
    tracing::info!("stopped");
    served
}

/// The gateway with its keys in Redis, which expires them after the retention by itself.
async fn serve_redis(
    settings: Settings,
    terminated: crate::signal::Terminated,
) -> anyhow::Result<()> {
    let unsupported = [
        (
            settings.sealing.is_some(),
            "sealed bodies (--sealing-keys-file, GUESTLIST_SEALING_KEYS)",
        ),
        (
            settings.key_hashing.is_some(),
            "hashed keys (GUESTLIST_KEY_HASHING_SECRET)",
        ),
        (
            settings.max_in_flight_per_scope.is_some(),
            "--max-in-flight-per-scope",
        ),
        (
            settings.max_keys_per_scope.is_some(),
            "--max-keys-per-scope",
        ),
    ];
    if let Some((_, what)) = unsupported.iter().find(|(set, _)| *set) {
        anyhow::bail!(
            "{what} needs a SQL key store: with Redis it is not available yet. Keep keys in \
             PostgreSQL, MySQL/MariaDB or SQLite, or leave it out"
        );
    }
    let keys = database::connect_redis(&settings.database)
        .await?
        .prefix(settings.table.clone())
        .retention(retention(&settings)?);
    // Say so at start-up when Redis may forget keys: the guarantee rests on it keeping them.
    match keys.persistence().await {
        Ok(persistence) => {
            for risk in persistence.risks() {
                tracing::warn!("Redis may forget idempotency keys: {risk}");
            }
        }
        Err(err) => tracing::warn!(error = %err, "cannot read Redis's persistence settings"),
    }
    let served = serve(keys.clone(), keys, &settings, terminated).await;
    tracing::info!("stopped");
    served
}

/// Serves the gateway on `keys` until SIGTERM, then lets the requests in flight finish.
async fn serve<K: KeyStore>(
    keys: K,
    health: impl ops::Health,
    settings: &Settings,
    terminated: crate::signal::Terminated,
) -> anyhow::Result<()> {
    let (stop, stopped) = watch::channel(false);
    let shutdown = move || {
        let mut stopped = stopped.clone();
        async move {
            let _ = stopped.wait_for(|stop| *stop).await;
        }
    };
    if let Some(addr) = settings.metrics_listen {
        ops::serve(addr, health, None, shutdown()).await?;
    }

    let scoped = settings.scope_from != ScopeFrom::None;
    let proxy = Arc::new(Proxy::new(
        &settings.upstream,
        settings.upstream_timeout,
        scoped,
    )?);
    let layer = layer(keys, settings);
    let attempts = layer.attempts();
    let app = Router::new()
        .fallback(proxy::forward)
        .with_state(proxy)
        .layer(layer)
        // Whatever answers early, the client reads the answer (lingering close).
        .layer(axum::middleware::map_request(lingering::linger))
        // Outermost: a body that stops arriving fails its request (and ends the lingering
        // drain) instead of holding the connection open.
        .layer(tower_http::timeout::RequestBodyTimeoutLayer::new(
            settings.body_timeout,
        ));
    let listener = tokio::net::TcpListener::bind(&settings.listen)
        .await
        .with_context(|| format!("cannot listen on {}", settings.listen))?;
    // The line scripts and tests wait for: the address actually bound (port 0 picks one).
    println!(
        "guestlist gateway on http://{} → {} (keys in {})",
        listener.local_addr()?,
        settings.upstream,
        database::redact(&settings.database)
    );
    tokio::spawn(async move {
        terminated.wait().await;
        tracing::info!("stopping: finishing the requests in flight");
        let _ = stop.send(true);
    });
    let limits = server::Limits {
        max_connections: settings.max_connections,
        header_timeout: settings.header_timeout,
    };
    server::serve(listener, app, limits, shutdown()).await;
    // A request whose client hung up is still running on its own task: let it store its answer
    // (it cannot outlast the upstream timeout by much) rather than leave its key locked.
    let patience = settings.upstream_timeout + std::time::Duration::from_secs(5);
    if tokio::time::timeout(patience, attempts.settled())
        .await
        .is_err()
    {
        tracing::warn!(
            running = attempts.running(),
            "stopping with attempts still running; their keys stay locked until their leases end"
        );
    }
    Ok(())
}

/// The Idempotency-Key layer, configured by the settings.
fn layer<K: KeyStore>(keys: K, settings: &Settings) -> IdempotencyLayer<Plain<K>> {
    let layer = IdempotencyLayer::new(keys)
        .replay_cache(ReplayCache::new(
            settings.replay_cache_entries,
            settings.replay_cache as u64,
            settings.replay_cache_ttl,
        ))
        .key_from(settings.key_from.clone())
        .require_key(settings.require_key)
        .methods(settings.methods.clone())
        .lease(settings.lease)
        .in_flight_wait(settings.in_flight_wait)
        .max_request_body(settings.max_body)
        .max_stored_body(settings.max_body)
        .max_in_flight_per_scope(settings.max_in_flight_per_scope)
        .max_keys_per_scope(settings.max_keys_per_scope)
        .mismatch_status(settings.mismatch_status);
    // The layer releases a key on 5xx and 429; the proxy marks the 5xx after which the work may
    // have run (an upstream 500, 502 or 504, a timeout) to keep their keys locked instead.
    match &settings.scope_from {
        ScopeFrom::Authorization => layer,
        ScopeFrom::None => layer.scope(|_| Scope::new("all").ok()),
        ScopeFrom::Header(name) => {
            let hint = format!(
                "send one {name} header (1 to 255 printable ASCII characters, not blank): keys \
                 are scoped to its value"
            );
            let name = name.clone();
            layer
                .scope(move |parts| {
                    // One non-blank value: blank ones would be one scope shared by every such
                    // client, and of two values, which would name it?
                    let mut values = parts.headers.get_all(&name).iter();
                    let value = values.next()?.to_str().ok()?.trim();
                    if values.next().is_some() || value.is_empty() {
                        return None;
                    }
                    Scope::new(value).ok()
                })
                .scope_hint(hint)
        }
    }
}
