//! The gateway's listener: at most so many connections at once, and a time limit on each
//! request's head, so that clients that send slowly (or not at all) cannot hoard descriptors.
//!
//! `axum::serve` offers neither; this is the same accept loop with hyper's own header-read
//! timeout turned on and a semaphore in front of `accept`. Bodies are limited by a timeout layer
//! on the router (see `mod.rs`).

use std::future::Future;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use axum::Router;
use axum::extract::ConnectInfo;
use hyper_util::rt::{TokioIo, TokioTimer};
use hyper_util::server::graceful::GracefulShutdown;
use hyper_util::service::TowerToHyperService;
use tokio::net::TcpListener;
use tokio::sync::Semaphore;
use tower::ServiceExt;

/// What one slow client may hold.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Limits {
    /// Connections open at once; the next client waits in the listen backlog.
    pub(crate) max_connections: usize,
    /// How long a request's head may take to arrive.
    pub(crate) header_timeout: Duration,
}

/// Serves `app` on `listener` within `limits` until `shutdown` completes, then lets the
/// connections in flight finish their requests.
pub(crate) async fn serve(
    listener: TcpListener,
    app: Router,
    limits: Limits,
    shutdown: impl Future<Output = ()>,
) {
    let permits = Arc::new(Semaphore::new(limits.max_connections));
    let graceful = GracefulShutdown::new();
    let mut http = hyper::server::conn::http1::Builder::new();
    http.timer(TokioTimer::new())
        .header_read_timeout(limits.header_timeout);
    tokio::pin!(shutdown);
    loop {
        let permit = tokio::select! {
            permit = Arc::clone(&permits).acquire_owned() => permit.expect("the semaphore is never closed"),
            () = &mut shutdown => break,
        };
        let (stream, peer) = tokio::select! {
            accepted = listener.accept() => match accepted {
                Ok(accepted) => accepted,
                Err(err) => {
                    // Out of descriptors, say: wait a little rather than spin.
                    tracing::warn!(error = %err, "cannot accept a connection");
                    tokio::time::sleep(Duration::from_millis(50)).await;
                    continue;
                }
            },
            () = &mut shutdown => break,
        };
        let app = app
            .clone()
            .map_request(move |request: hyper::Request<hyper::body::Incoming>| {
                let mut request = request.map(axum::body::Body::new);
                request
                    .extensions_mut()
                    .insert(ConnectInfo::<SocketAddr>(peer));
                request
            });
        let connection = http.serve_connection(TokioIo::new(stream), TowerToHyperService::new(app));
        let connection = graceful.watch(connection);
        tokio::spawn(async move {
            let _permit = permit; // the connection's slot, until it closes
            if let Err(err) = connection.await {
                tracing::debug!(error = %err, %peer, "connection ended");
            }
        });
    }
    drop(listener);
    graceful.shutdown().await;
}
