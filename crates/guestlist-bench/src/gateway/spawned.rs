//! A server the bench starts beside the gateway (nginx, the peer proxy): a process of its own on
//! a free loopback port, its files in a temporary directory, stopped when dropped.

use std::process::{Child, Command, Stdio};
use std::time::Duration;

use anyhow::Context;

/// How a server is stopped.
#[derive(Debug, Clone, Copy)]
pub(super) enum Stop {
    /// SIGTERM, for a master process that must stop its workers (SIGKILL would leave them).
    Term,
    /// SIGKILL, for a single process that would otherwise wait for idle keep-alive clients.
    Kill,
}

/// A running server.
pub(super) struct Spawned {
    pub(super) url: String,
    child: Child,
    stop: Stop,
    _dir: tempfile::TempDir,
}

/// A port free on loopback, for a server to listen on.
pub(super) fn free_port() -> anyhow::Result<u16> {
    let listener = std::net::TcpListener::bind("127.0.0.1:0")?;
    Ok(listener.local_addr()?.port())
}

/// Whether something listens on `port` within five seconds.
pub(super) async fn listening(port: u16) -> bool {
    for _ in 0..100 {
        if tokio::net::TcpStream::connect(("127.0.0.1", port))
            .await
            .is_ok()
        {
            return true;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    false
}

impl Spawned {
    /// Runs `command` (`what` in messages), which keeps its files in `dir`, and waits until it
    /// listens on `port`; a server that never does is stopped again.
    pub(super) async fn start(
        mut command: Command,
        what: &str,
        port: u16,
        dir: tempfile::TempDir,
        stop: Stop,
    ) -> anyhow::Result<Self> {
        let child = command
            .stdin(Stdio::null())
            .spawn()
            .with_context(|| format!("cannot start {what}"))?;
        let spawned = Self {
            url: format!("http://127.0.0.1:{port}"),
            child,
            stop,
            _dir: dir,
        };
        anyhow::ensure!(
            listening(port).await,
            "{what} did not start listening on port {port}"
        );
        Ok(spawned)
    }
}

/// Stopped with the bench, however the bench ends.
impl Drop for Spawned {
    fn drop(&mut self) {
        match self.stop {
            Stop::Term => {
                let _ = Command::new("kill")
                    .args(["-TERM", &self.child.id().to_string()])
                    .status();
            }
            Stop::Kill => {
                let _ = self.child.kill();
            }
        }
        let _ = self.child.wait();
    }
}
