//! The operator's side door of a long-running command (the gateway, the relay): `/metrics`
//! (Prometheus text) and `/healthz`, on an address of their own so that neither shadows a path
//! of the upstream.

use std::future::Future;
use std::net::SocketAddr;

use axum::Router;
use axum::http::StatusCode;
use axum::routing::get;
use guestlist::redis::RedisKeyStore;
use guestlist::sqlx::Pool;
use metrics_exporter_prometheus::PrometheusBuilder;

/// How long `/healthz` waits for the key store.
const HEALTH_WAIT: std::time::Duration = std::time::Duration::from_secs(2);

/// A key store `/healthz` can ask whether it answers.
pub(crate) trait Health: Clone + Send + Sync + 'static {
    /// `Ok` while the store answers; what went wrong otherwise.
    fn check(&self) -> impl Future<Output = Result<(), String>> + Send;
}

/// A SQL store answers when its pool gives a connection.
impl<DB: guestlist::Backend> Health for Pool<DB> {
    async fn check(&self) -> Result<(), String> {
        self.acquire()
            .await
            .map(drop)
            .map_err(|err| err.to_string())
    }
}

/// Redis answers a `PING`.
impl Health for RedisKeyStore {
    async fn check(&self) -> Result<(), String> {
        self.ping().await.map_err(|err| err.to_string())
    }
}

/// Installs the Prometheus recorder and serves `/metrics` and `/healthz` (200 while the key
/// store answers, 503 when it does not) on `addr`, until `shutdown`; with `ready`, `/readyz`
/// too (200 while the hop works, 503 with the cause during an outage).
pub(crate) async fn serve(
    addr: SocketAddr,
    store: impl Health,
    ready: Option<guestlist::outbox::Health>,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> anyhow::Result<()> {
    let handle = PrometheusBuilder::new()
        .install_recorder()
        .map_err(|err| anyhow::anyhow!("cannot install the metrics recorder: {err}"))?;
    let listener = tokio::net::TcpListener::bind(addr)
        .await
        .map_err(|err| anyhow::anyhow!("cannot listen for metrics on {addr}: {err}"))?;
    let app = Router::new()
        .route("/metrics", get(move || std::future::ready(handle.render())))
        .route(
            "/healthz",
            get(move || {
                let store = store.clone();
                async move {
                    let answer = tokio::time::timeout(HEALTH_WAIT, store.check()).await;
                    match answer {
                        Ok(Ok(())) => (StatusCode::OK, "ok\n".to_owned()),
                        Ok(Err(err)) => (
                            StatusCode::SERVICE_UNAVAILABLE,
                            format!("the key store does not answer: {err}\n"),
                        ),
                        Err(_) => (
                            StatusCode::SERVICE_UNAVAILABLE,
                            format!("the key store did not answer within {HEALTH_WAIT:?}\n"),
                        ),
                    }
                }
            }),
        );
    let app = match ready {
        Some(ready) => app.route(
            "/readyz",
            get(move || {
                let answer = match ready.cause() {
                    None => (StatusCode::OK, "ready\n".to_owned()),
                    Some(cause) => (
                        StatusCode::SERVICE_UNAVAILABLE,
                        format!("outage, waiting for {cause}\n"),
                    ),
                };
                std::future::ready(answer)
            }),
        ),
        None => app,
    };
    let addr = listener.local_addr()?;
    println!("metrics on http://{addr}/metrics, health on http://{addr}/healthz");
    tokio::spawn(async move {
        if let Err(err) = axum::serve(listener, app)
            .with_graceful_shutdown(shutdown)
            .await
        {
            tracing::error!(error = %err, "the metrics listener stopped");
        }
    });
    Ok(())
}
