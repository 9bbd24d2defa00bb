//! The console draws what only the gateway counts (replays, 409s) from the gateway's own
//! `/metrics`: a real gateway, a real console, the page read as a browser reads it.

use std::io::{BufRead as _, BufReader};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use crate::harness::{Gateway, Store, Upstream, post};

const ALICE: (&str, &str) = ("authorization", "Bearer alice");

/// A `guestlist console` that stops with the story.
struct Console(std::process::Child, String);

impl Drop for Console {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

impl Console {
    /// Starts a console on `database` reading the metrics at `metrics`.
    fn start(database: &str, metrics: &str) -> Self {
        let mut child = Command::new(env!("CARGO_BIN_EXE_guestlist"))
            .args(["console", "--database", database, "--listen", "127.0.0.1:0"])
            .args(["--metrics-from", metrics])
            .env_remove("GUESTLIST_DATABASE_URL")
            .env_remove("GUESTLIST_CONSOLE_TOKEN")
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .expect("start guestlist console");
        let mut line = String::new();
        BufReader::new(child.stdout.take().unwrap())
            .read_line(&mut line)
            .unwrap();
        let at = line
            .split_whitespace()
            .find(|w| w.starts_with("http://"))
            .unwrap_or_else(|| panic!("the console did not start: {line:?}"))
            .trim_end_matches('/')
            .to_owned();
        Self(child, at)
    }

    async fn page(&self) -> String {
        reqwest::get(format!("{}/", self.1))
            .await
            .unwrap()
            .text()
            .await
            .unwrap()
    }
}

#[tokio::test]
async fn the_console_draws_the_gateways_replays_and_409s_from_its_metrics() {
    let store = Store::sqlite().await;
    let upstream = Upstream::start().await;
    let gateway = Gateway::start(&upstream.url, &store, &["--metrics-listen", "127.0.0.1:0"]).await;
    let metrics = format!(
        "{}/metrics",
        gateway.ops.as_deref().expect("metrics address")
    );
    let database = store.args()[1].clone();
    let console = Console::start(&database, &metrics);
    // The console's first read is where its counting starts: before any traffic.
    let before = console.page().await;
    assert!(before.contains("read from 1 program"), "{before}");
    assert!(!before.contains("id=\"chart-replays\""), "{before}");

    let charges = format!("{}/charges", gateway.url);
    let first = post(&charges, &[ALICE, ("idempotency-key", "k-1")], b"{}").await;
    assert_eq!(first.status, 201);
    for _ in 0..3 {
        assert!(
            post(&charges, &[ALICE, ("idempotency-key", "k-1")], b"{}")
                .await
                .replayed
        );
    }
    // One slow attempt holds k-2 while two retries come: 409 each.
    let slow = format!("{}/charges?delay_ms=1500", gateway.url);
    let held = tokio::spawn({
        let slow = slow.clone();
        async move { post(&slow, &[ALICE, ("idempotency-key", "k-2")], b"{}").await }
    });
    let deadline = Instant::now() + Duration::from_secs(5);
    while upstream.executions("/charges") < 2 && Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    for _ in 0..2 {
        let answer = post(&slow, &[ALICE, ("idempotency-key", "k-2")], b"{}").await;
        assert_eq!(answer.status, 409, "{answer:?}");
    }
    assert_eq!(held.await.unwrap().status, 201);

    // The page reads the metrics again at most every few seconds.
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let page = console.page().await;
        let drawn = page.contains("id=\"chart-replays\"")
            && page.contains("replayed (3 in the last hour)")
            && page.contains("answered 409 (2 in the last hour)");
        if drawn {
            assert!(!page.contains("cannot read http"), "{page}");
            break;
        }
        assert!(
            Instant::now() < deadline,
            "no replays and 409s drawn:\n{page}"
        );
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
}
