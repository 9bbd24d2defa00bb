//! A TCP proxy on loopback whose link a test can cut and mend: an outage of a real database or
//! broker for one test, without stopping the server the other tests share.
//!
//! While cut, the proxy drops every open connection and refuses new ones (it accepts and closes
//! them at once, as a server that went away mid-handshake would look); mended, it forwards again.

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

use tokio::net::{TcpListener, TcpStream};
use tokio::sync::watch;

/// A proxy from a port of its own on 127.0.0.1 to `upstream`.
#[derive(Debug)]
pub struct CutProxy {
    addr: SocketAddr,
    cut: Arc<AtomicBool>,
    // Bumped on every cut, so that the connections open then end.
    generation: watch::Sender<u64>,
    refused: Arc<AtomicU64>,
    task: tokio::task::JoinHandle<()>,
}

impl CutProxy {
    /// Starts a proxy to `upstream` (`host:port`).
    pub async fn to(upstream: &str) -> Self {
        let listener = TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind a loopback port");
        let addr = listener.local_addr().expect("the proxy's address");
        let cut = Arc::new(AtomicBool::new(false));
        let refused = Arc::new(AtomicU64::new(0));
        let (generation, _) = watch::channel(0u64);
        let upstream = upstream.to_owned();
        let task = tokio::spawn({
            let (cut, refused, generation) = (cut.clone(), refused.clone(), generation.clone());
            async move {
                while let Ok((client, _)) = listener.accept().await {
                    if cut.load(Ordering::SeqCst) {
                        refused.fetch_add(1, Ordering::SeqCst);
                        drop(client);
                        continue;
                    }
                    let mut ended = generation.subscribe();
                    let upstream = upstream.clone();
                    tokio::spawn(async move {
                        let Ok(mut server) = TcpStream::connect(&upstream).await else {
                            return;
                        };
                        let mut client = client;
                        tokio::select! {
                            _ = tokio::io::copy_bidirectional(&mut client, &mut server) => {}
                            _ = ended.changed() => {}
                        }
                    });
                }
            }
        });
        Self {
            addr,
            cut,
            generation,
            refused,
            task,
        }
    }

    /// The proxy's `host:port`, to put in a URL in place of the server's.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// Drops every open connection and refuses new ones until [`mend`](Self::mend).
    pub fn cut(&self) {
        self.cut.store(true, Ordering::SeqCst);
        self.generation.send_modify(|g| *g += 1);
    }

    /// Forwards again.
    pub fn mend(&self) {
        self.cut.store(false, Ordering::SeqCst);
    }

    /// Connections refused while cut: proof that the client tried, and so was cut off.
    pub fn refused(&self) -> u64 {
        self.refused.load(Ordering::SeqCst)
    }
}

impl Drop for CutProxy {
    fn drop(&mut self) {
        self.task.abort();
        self.generation.send_modify(|g| *g += 1);
    }
}
