//! Keyed clients that keep sending through a database restart: the shared half of the restart
//! stories of the HTTP layer and the gateway, whose other half (what a retry replays, how many
//! times the work ran) is each one's own.

use std::collections::BTreeMap;
use std::future::Future;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use crate::private_postgres::PrivatePostgres;
use crate::private_server::PrivateServer;

/// Clients at once.
pub const CLIENTS: usize = 4;
/// Keys each client sends, one after another.
pub const EACH: usize = 25;

/// What the clients were answered.
#[derive(Debug, Default)]
pub struct Answered {
    /// The body each key was answered with, by key (`restart-<client>-<n>`).
    pub bodies: BTreeMap<String, Vec<u8>>,
    /// Answers that asked for a retry (a 409, a 503) before the one kept.
    pub retried: u64,
}

/// [`CLIENTS`] clients send [`EACH`] keyed calls each with `send`, retrying each key every
/// 100 ms until it is answered (for at most a minute), while `cluster` is stopped the hard way
/// (`pg_ctl stop -m immediate`) and started again: after the first 20 answers, and before the
/// last 20. `send` answers a key's body, or why it was not answered (a retry is asked for).
pub async fn through_a_restart<F, Fut>(cluster: &PrivatePostgres, send: F) -> Answered
where
    F: Fn(String) -> Fut + Clone + Send + Sync + 'static,
    Fut: Future<Output = Result<Vec<u8>, String>> + Send,
{
    let answered = Arc::new(AtomicU64::new(0));
    let retried = Arc::new(AtomicU64::new(0));
    let clients: Vec<_> = (0..CLIENTS)
        .map(|client| {
            let (send, answered, retried) = (send.clone(), answered.clone(), retried.clone());
            tokio::spawn(async move {
                let mut bodies = BTreeMap::new();
                for n in 0..EACH {
                    let key = format!("restart-{client}-{n}");
                    let started = Instant::now();
                    let body = loop {
                        match send(key.clone()).await {
                            Ok(body) => break body,
                            Err(why) => {
                                retried.fetch_add(1, Ordering::SeqCst);
                                assert!(
                                    started.elapsed() < Duration::from_secs(60),
                                    "{key}: still {why} after a minute"
                                );
                                tokio::time::sleep(Duration::from_millis(100)).await;
                            }
                        }
                    };
                    answered.fetch_add(1, Ordering::SeqCst);
                    bodies.insert(key, body);
                    tokio::time::sleep(Duration::from_millis(10)).await;
                }
                bodies
            })
        })
        .collect();
    while answered.load(Ordering::SeqCst) < 20 {
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    assert!(
        answered.load(Ordering::SeqCst) < (CLIENTS * EACH) as u64 - 20,
        "the restart lands while the clients send"
    );
    cluster.restart(Duration::from_secs(1)).await;

    let mut bodies = BTreeMap::new();
    for client in clients {
        bodies.extend(client.await.expect("every client is answered in the end"));
    }
    Answered {
        bodies,
        retried: retried.load(Ordering::SeqCst),
    }
}
