//! The held relay: a child process whose publisher holds a confirmed batch unstamped, for the
//! SIGKILL and SIGSTOP stories to hit.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus};
use std::time::{Duration, Instant};

use crate::Fixture;
use guestlist_sqlx::{Confirmed, Outbox, OutboxMessage, Outcomes, Publish, PublishError};
use sqlx::Pool;
use tempfile::TempDir;

use super::line::*;
use crate::brokers::Broker;
use crate::brokers::child::parent;

/// A real publisher that, once the broker has confirmed a batch, writes a marker file, stops its
/// own process if given the outbox to watch (SIGSTOP: the pause then falls exactly in the
/// window, however slow the machine), and holds the batch for a while before the relay may
/// stamp it: the window a crash or a pause hits.
pub struct HeldAfterConfirm<P, DB: Fixture> {
    inner: P,
    marker: PathBuf,
    stops: Option<(Outbox<DB>, Pool<DB>)>,
    hold: Duration,
}

impl<P: Publish, DB: Fixture> Publish for HeldAfterConfirm<P, DB> {
    async fn publish(&self, messages: &[OutboxMessage], outcomes: &mut Outcomes) {
        // Confirmed, but handed to the relay only after the hold.
        let mut confirmed = Outcomes::with_capacity(messages.len());
        self.inner.publish(messages, &mut confirmed).await;
        std::fs::write(&self.marker, messages.len().to_string()).unwrap();
        if let Some((outbox, pool)) = &self.stops {
            // While it waits on the broker the relay beats its heartbeat and renews its lease
            // every third of one, in writes of their own, and a process stopped inside a write
            // keeps SQLite's lock (or a MariaDB row lock) from its successor: the pause comes
            // right after a renewal (the beat's last write) has committed, a third of a lease
            // before the next. Then the pause, which returns once
            // the story sends SIGCONT; until then nothing of this process runs.
            let left = async || {
                let stats = outbox.stats(pool).await.ok()?;
                stats.shards.iter().filter_map(|s| s.lease.expires_in).max()
            };
            let mut before = left().await;
            loop {
                tokio::time::sleep(Duration::from_millis(2)).await;
                let now = left().await;
                if before.is_some() && now > before {
                    break;
                }
                before = now;
            }
            signal_pid(std::process::id(), "-STOP");
        }
        tokio::time::sleep(self.hold).await;
        for n in 0..messages.len() {
            if let Some(outcome) = confirmed.get(n) {
                outcomes.set(n, clone_outcome(outcome));
            }
        }
    }
}

pub(super) fn clone_outcome(
    outcome: &Result<Confirmed, PublishError>,
) -> Result<Confirmed, PublishError> {
    match outcome {
        Ok(confirmed) => Ok(*confirmed),
        Err(err) => Err(PublishError::new(err.to_string())),
    }
}

/// Waits until the child wrote its marker: the broker has confirmed a batch it holds unstamped.
pub(super) async fn until_marked(marker: &Path) {
    let deadline = Instant::now() + Duration::from_secs(30);
    while !marker.exists() {
        assert!(Instant::now() < deadline, "the relay never published");
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}

/// Waits until the child's process is stopped (`T` in `/proc/PID/stat`).
pub(super) async fn until_stopped(child: &Child) {
    let stat = format!("/proc/{}/stat", child.id());
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let text = std::fs::read_to_string(&stat).unwrap();
        // The state follows the command's name, which is in parentheses.
        let state = text.rsplit_once(") ").map(|(_, rest)| &rest[..1]);
        if state == Some("T") {
            return;
        }
        assert!(Instant::now() < deadline, "the relay never stopped");
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}

/// Waits for `child`, sent a signal that stops it, to exit; fails after `within` with what it
/// was waited for, rather than holding the story until the runner's timeout.
pub(super) async fn until_exited(child: &mut Child, within: Duration, what: &str) -> ExitStatus {
    let deadline = Instant::now() + within;
    loop {
        if let Some(status) = child.try_wait().unwrap() {
            return status;
        }
        assert!(
            Instant::now() < deadline,
            "{what}: process {} still running after {within:?}",
            child.id()
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

pub(super) fn signal(child: &Child, signal: &str) {
    signal_pid(child.id(), signal);
}

fn signal_pid(pid: u32, signal: &str) {
    let sent = Command::new("kill")
        .args([signal, &pid.to_string()])
        .status()
        .unwrap();
    assert!(sent.success(), "kill {signal}");
}

/// The relay a test kills or pauses between the broker's confirmation and the stamp.
pub async fn held_relay<B: Broker, DB: Fixture>() {
    let Some((tag, url)) = parent("held_relay") else {
        return;
    };
    let marker = std::env::var(CHILD_MARKER).expect("the story names the marker file");
    let line = Line::<B, DB>::attach(&tag, &url).await;
    let held = HeldAfterConfirm {
        inner: line.rig.broker.publisher().await,
        marker: marker.into(),
        stops: std::env::var_os(CHILD_STOPS)
            .is_some()
            .then(|| (line.outbox.clone(), line.rig.db.pool.clone())),
        hold: Duration::from_millis(env_ms(CHILD_HOLD_MS)),
    };
    // The batch's messages share a key: pipelined, the whole batch is one publish, confirmed
    // together before the hold (in waves, the hold would come after the key's first message).
    let relay = line
        .relay(held, Duration::from_millis(env_ms(CHILD_LEASE_MS)))
        .pipeline_keys(true);
    relay.run(std::future::pending()).await.unwrap();
}

impl<B: Broker, DB: Fixture> Line<B, DB> {
    /// Commits `events` messages on one key, and starts a relay child that publishes them and,
    /// once the broker confirmed them, stops itself if `stops` and then holds them unstamped for
    /// `hold` (its lease: 1 s). Returns when the broker has confirmed the batch (and the child
    /// stopped), with the child and its marker's directory.
    pub(super) async fn held_batch(
        &self,
        name: &str,
        events: i64,
        stops: bool,
        hold: Duration,
    ) -> (Child, TempDir) {
        for n in 0..events {
            self.enqueue(&format!("evt_{n}"), "order-42", true).await;
        }
        let dir = tempfile::tempdir().unwrap();
        let marker = dir.path().join("confirmed");
        let mut env = vec![
            (CHILD_MARKER, marker.display().to_string()),
            (CHILD_HOLD_MS, hold.as_millis().to_string()),
            (CHILD_LEASE_MS, "1000".to_owned()),
        ];
        if stops {
            env.push((CHILD_STOPS, "1".to_owned()));
        }
        let child = self.child(name, "held_relay", &env);
        until_marked(&marker).await;
        if stops {
            until_stopped(&child).await;
        }
        (child, dir)
    }
}
