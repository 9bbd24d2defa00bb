//! A server process killed with keyed requests in flight, and started again: how soon its
//! clients' retries get their answer, and how many times the work ran.

use std::io::{BufRead, BufReader, Lines};
use std::process::{Child, ChildStdout, Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

use reqwest::StatusCode;

use super::app::{AppState, HANGING};
use super::client::{Answer, Call, Server};
use super::stores::{Settings, Store};

/// Environment of the child server: where the store is, which test's tables, its lease, and
/// how long a request waits for the answer of a key in flight.
const CHILD_URL: &str = "GUESTLIST_HTTP_CHILD_URL";
const CHILD_TAG: &str = "GUESTLIST_HTTP_CHILD_TAG";
const CHILD_LEASE_MS: &str = "GUESTLIST_HTTP_CHILD_LEASE_MS";
const CHILD_WAIT_MS: &str = "GUESTLIST_HTTP_CHILD_WAIT_MS";
/// What the child prints once it listens.
const LISTENING: &str = "LISTENING ON";

/// The API under test served by a process of its own (this test binary, running
/// [`serve_child`]), to be killed.
pub struct ChildServer {
    process: Child,
    pub base: String,
    /// Its output past the address (away while [`ChildServer::hanging`] reads it).
    lines: Option<Lines<BufReader<ChildStdout>>>,
}

impl ChildServer {
    /// Starts the child of the test `name` on `store`'s tables, and returns once it listens.
    pub fn start<S: Store>(name: &str, store: &S, lease: Duration, wait: Duration) -> Self {
        let module = name.split('_').next().unwrap();
        let mut process = Command::new(std::env::current_exe().unwrap())
            .args([
                &format!("{module}::sigkill_child"),
                "--exact",
                "--ignored",
                "--nocapture",
            ])
            .env(CHILD_URL, store.url())
            .env(CHILD_TAG, store.tag())
            .env(CHILD_LEASE_MS, lease.as_millis().to_string())
            .env(CHILD_WAIT_MS, wait.as_millis().to_string())
            .stdout(Stdio::piped())
            .spawn()
            .expect("start the child server");
        let mut lines = BufReader::new(process.stdout.take().unwrap()).lines();
        let base = loop {
            let line = lines.next().expect("the child prints its address").unwrap();
            if let Some(base) = line.strip_prefix(LISTENING) {
                break base.trim().to_owned();
            }
        };
        Self {
            process,
            base,
            lines: Some(lines),
        }
    }

    /// Waits until `count` handlers did their work and hung.
    pub async fn hanging(mut self, count: usize) -> Self {
        let mut lines = self.lines.take().expect("the child's output");
        let (lines, seen) = tokio::task::spawn_blocking(move || {
            let mut seen = 0;
            while seen < count {
                match lines.next() {
                    Some(Ok(line)) if line.contains(HANGING) => seen += 1,
                    Some(Ok(_)) => {}
                    _ => break,
                }
            }
            (lines, seen)
        })
        .await
        .unwrap();
        assert_eq!(seen, count, "the child's handlers did their work and hung");
        self.lines = Some(lines);
        self
    }

    /// SIGKILLs the child, and returns once it is gone.
    pub fn kill(mut self) {
        self.process.kill().expect("SIGKILL the child");
        self.process.wait().unwrap();
    }
}

impl Drop for ChildServer {
    fn drop(&mut self) {
        let _ = self.process.kill();
        let _ = self.process.wait();
    }
}

/// The child: serves the API under test on the tables its parent named, until killed.
pub async fn serve_child<S: Store>() {
    let (Ok(url), Ok(tag), Ok(lease)) = (
        std::env::var(CHILD_URL),
        std::env::var(CHILD_TAG),
        std::env::var(CHILD_LEASE_MS),
    ) else {
        eprintln!("sigkill_child runs only as the child process of a SIGKILL story");
        return;
    };
    let wait = std::env::var(CHILD_WAIT_MS)
        .ok()
        .and_then(|ms| ms.parse().ok());
    let store = S::attach(&url, &tag).await;
    let settings = Settings {
        lease: Duration::from_millis(lease.parse().unwrap()),
        in_flight_wait: wait.map(Duration::from_millis),
        ..Settings::default()
    };
    let server = Server::start(store.router(AppState::default(), &settings)).await;
    println!("{LISTENING} {}", server.base);
    std::future::pending::<()>().await;
}

/// What one key's client saw while it retried through the restart.
struct Retried {
    /// Its first 2xx, and when (after the restart).
    answer: Answer,
    after: Duration,
    /// Its answers that were not replays.
    fresh: usize,
    /// The longest any one try took.
    longest_try: Duration,
}

/// Retries `call` on `base` every 100 ms until a 2xx, then once more; gives up at `deadline`.
async fn retry_until_answered(
    base: &str,
    call: &Call,
    since: Instant,
    deadline: Instant,
) -> Retried {
    let mut fresh = 0;
    let mut longest_try = Duration::ZERO;
    loop {
        let sent = Instant::now();
        let answer = call.send(base).await;
        longest_try = longest_try.max(sent.elapsed());
        if answer.status.is_success() {
            fresh += usize::from(!answer.replayed());
            let after = since.elapsed();
            let again = call.send(base).await;
            assert!(again.replayed(), "{}", again.text());
            assert_eq!(again.body, answer.body, "the retry after it replays it");
            return Retried {
                answer,
                after,
                fresh,
                longest_try,
            };
        }
        assert_eq!(answer.status, StatusCode::CONFLICT, "{}", answer.text());
        assert!(Instant::now() < deadline, "no answer by the deadline");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

pub async fn twenty_keys_in_flight_at_a_kill_are_answered_after_the_restart<S: Store>(name: &str) {
    // SQLite in transactional mode: the first handler's transaction holds the only write lock.
    let keys = if S::SINGLE_WRITER { 1 } else { 20 };
    let lease = Duration::from_secs(8);
    let wait = Duration::from_millis(1500);
    let store = S::open(name).await;
    let state = AppState::default();
    let child = ChildServer::start(name, &store, lease, wait);
    let calls: Vec<Call> = (0..keys)
        .map(|i| Call::new(&format!("killed-{i}")))
        .collect();
    let doomed: Vec<_> = calls
        .iter()
        .map(|call| {
            let (call, base) = (call.clone().header("x-test-hang", "1"), child.base.clone());
            tokio::spawn(async move {
                let _ = tokio::time::timeout(Duration::from_secs(60), call.try_send(&base)).await;
            })
        })
        .collect();
    let child = tokio::time::timeout(Duration::from_secs(60), child.hanging(keys))
        .await
        .expect("the handlers hang");
    let killed_at = Instant::now();
    child.kill();
    for doomed in doomed {
        doomed.abort();
    }

    let child = Arc::new(ChildServer::start(name, &store, lease, wait));
    let restarted_at = Instant::now();
    let deadline = killed_at + lease + Duration::from_secs(15);
    let clients: Vec<_> = calls
        .iter()
        .map(|call| {
            let (call, child) = (call.clone(), Arc::clone(&child));
            tokio::spawn(async move {
                retry_until_answered(&child.base, &call, restarted_at, deadline).await
            })
        })
        .collect();
    let mut retried = Vec::new();
    for client in clients {
        retried.push(client.await.expect("the client's retries"));
    }
    let slowest = retried.iter().map(|r| r.after).max().unwrap();
    let longest_try = retried.iter().map(|r| r.longest_try).max().unwrap();
    eprintln!(
        "{}: {keys} keys answered within {slowest:?} of the restart (lease {lease:?}); \
         the longest try took {longest_try:?}",
        S::LABEL
    );
    assert!(
        longest_try < wait + Duration::from_secs(1),
        "no try waited past its bound of {wait:?}: {longest_try:?}"
    );
    if S::frees_at_once() {
        assert!(
            slowest < Duration::from_secs(3),
            "a crashed holder's keys are free at once: the slowest took {slowest:?}"
        );
    } else {
        let earliest = retried
            .iter()
            .map(|r| restarted_at + r.after)
            .min()
            .unwrap();
        assert!(
            earliest + Duration::from_millis(500) >= killed_at + lease,
            "where nothing tells that the holder died, the lease stands"
        );
    }
    for (call, retried) in calls.iter().zip(&retried) {
        assert_eq!(
            retried.fresh,
            1,
            "{}: one try ran the request anew, the rest replay it",
            call.key.as_deref().unwrap()
        );
        assert_eq!(retried.answer.status, StatusCode::CREATED);
    }
    if S::TRANSACTIONAL {
        assert_eq!(
            store.effects(&state).await,
            keys as u64,
            "one effect per key: the killed attempts' writes never committed"
        );
    }
}
