//! A Kafka-compatible broker (tansu) of one test's own, behind a fault proxy that its clients
//! cannot go around: the stories that cut Kafka off, and the soak rig's Kafka.

use std::time::Duration;

use crate::fault_proxy::FaultProxy;
use crate::private_postgres::free_port;

/// A tansu of one story's own, on a port of its own, that knows the address of a fault proxy in
/// front of it as its own: a Kafka client asks any broker where the cluster's brokers are and
/// goes there, so that every client of this one goes through the proxy. Its topics are in
/// memory; it is killed when dropped.
pub struct OwnTansu(std::process::Child);

impl OwnTansu {
    const BINARY_VAR: &'static str = "GUESTLIST_TEST_TANSU";
    /// A file to append tansu's own log to, to see what it did; none unless set.
    const LOG_VAR: &'static str = "GUESTLIST_TEST_TANSU_LOG";

    /// Where tansu's log goes: the file [`LOG_VAR`](Self::LOG_VAR) names, or nowhere.
    fn log() -> std::process::Stdio {
        std::env::var_os(Self::LOG_VAR)
            .and_then(|path| {
                std::fs::OpenOptions::new()
                    .create(true)
                    .append(true)
                    .open(path)
                    .ok()
            })
            .map_or_else(std::process::Stdio::null, std::process::Stdio::from)
    }

    /// Starts the proxy, then tansu behind it, and waits until tansu takes connections.
    pub async fn behind_proxy() -> (Self, FaultProxy) {
        let port = free_port();
        let proxy = FaultProxy::to(&format!("127.0.0.1:{port}")).await;
        let binary = std::env::var(Self::BINARY_VAR).unwrap_or_else(|_| "tansu".to_owned());
        let child = std::process::Command::new(&binary)
            .args([
                "broker",
                "--listener-url",
                &format!("tcp://127.0.0.1:{port}"),
                "--advertised-listener-url",
                &format!("tcp://{}", proxy.addr()),
                "--storage-engine",
                "memory://tansu/",
            ])
            .stdin(std::process::Stdio::null())
            .stdout(std::process::Stdio::null())
            .stderr(Self::log())
            .spawn()
            .unwrap_or_else(|err| {
                panic!(
                    "start tansu ({binary}): {err}\nRun scripts/test.sh, which installs tansu \
                     and names it in {}",
                    Self::BINARY_VAR
                )
            });
        let own = Self(child);
        let started = std::time::Instant::now();
        while std::net::TcpStream::connect(("127.0.0.1", port)).is_err() {
            assert!(
                started.elapsed() < Duration::from_secs(30),
                "the story's own tansu did not start"
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        (own, proxy)
    }
}

impl Drop for OwnTansu {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}
