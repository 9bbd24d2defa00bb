//! The parts of a gateway test: an upstream that counts what reaches it, the built `guestlist`
//! binary running `gateway`, and the key store it uses.

use std::collections::HashMap;
use std::process::Stdio;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::body::{Body, Bytes};
use axum::extract::{Request, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use tokio::io::{AsyncBufReadExt, BufReader, Lines};
use tokio::process::{Child, ChildStdout, Command};

/// How long a test waits for a process to say something.
const PATIENCE: Duration = Duration::from_secs(60);

/// What reached the upstream.
#[derive(Default)]
pub struct Seen {
    executions: AtomicU64,
    by_path: Mutex<HashMap<String, u64>>,
    keys: Mutex<Vec<Option<String>>>,
}

/// A small service that counts executions per path. `?delay_ms=N` answers after N ms (counted
/// on arrival), `?first_delay_ms=N` only the path's first execution, `?first_status=N` answers
/// the path's first execution with that status; a path under `/drop` sends half a body and
/// drops the connection.
pub struct Upstream {
    pub url: String,
    pub seen: Arc<Seen>,
    task: tokio::task::JoinHandle<()>,
}

impl Upstream {
    pub async fn start() -> Self {
        Self::on(tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap()).await
    }

    pub async fn on(listener: tokio::net::TcpListener) -> Self {
        let url = format!("http://{}", listener.local_addr().unwrap());
        let seen = Arc::new(Seen::default());
        let app = axum::Router::new()
            .fallback(execute)
            .with_state(Arc::clone(&seen));
        let task = tokio::spawn(async move {
            axum::serve(listener, app).await.unwrap();
        });
        Self { url, seen, task }
    }

    /// Executions of `path`.
    pub fn executions(&self, path: &str) -> u64 {
        self.seen
            .by_path
            .lock()
            .unwrap()
            .get(path)
            .copied()
            .unwrap_or(0)
    }

    /// Waits until `path` has been executed at least once.
    pub async fn reached(&self, path: &str) {
        let deadline = tokio::time::Instant::now() + PATIENCE;
        while self.executions(path) == 0 {
            assert!(
                tokio::time::Instant::now() < deadline,
                "nothing reached {path}"
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    /// The `Idempotency-Key` of every request that reached the upstream, in order.
    pub fn keys(&self) -> Vec<Option<String>> {
        self.seen.keys.lock().unwrap().clone()
    }
}

impl Drop for Upstream {
    fn drop(&mut self) {
        self.task.abort();
    }
}

async fn execute(State(seen): State<Arc<Seen>>, request: Request) -> Response {
    let path = request.uri().path().to_owned();
    let query = request.uri().query().unwrap_or_default().to_owned();
    let param = |name: &str| -> u64 {
        query
            .split('&')
            .find_map(|pair| pair.strip_prefix(name)?.strip_prefix('='))
            .and_then(|ms| ms.parse().ok())
            .unwrap_or(0)
    };
    let (delay, first_delay) = (param("delay_ms"), param("first_delay_ms"));
    let first_status = param("first_status");
    let key = header(request.headers(), "idempotency-key");
    let traceparent = header(request.headers(), "traceparent");
    let n = seen.executions.fetch_add(1, Ordering::SeqCst) + 1;
    let of_path = {
        let mut by_path = seen.by_path.lock().unwrap();
        let count = by_path.entry(path.clone()).or_default();
        *count += 1;
        *count
    };
    let delay = if of_path == 1 {
        delay.max(first_delay)
    } else {
        delay
    };
    seen.keys.lock().unwrap().push(key.clone());
    let body = axum::body::to_bytes(request.into_body(), usize::MAX)
        .await
        .unwrap();
    tokio::time::sleep(Duration::from_millis(delay)).await;
    if path.starts_with("/drop") {
        let chunks: Vec<Result<Bytes, std::io::Error>> = vec![
            Ok(Bytes::from_static(b"{\"half\": ")),
            Err(std::io::Error::other("the upstream fell over mid-response")),
        ];
        let stream = futures_util::stream::iter(chunks);
        return (StatusCode::CREATED, Body::from_stream(stream)).into_response();
    }
    if of_path == 1 && first_status != 0 {
        let status = StatusCode::from_u16(first_status as u16).unwrap();
        return (status, format!("first answer: {status}")).into_response();
    }
    let answer = serde_json::json!({
        "execution": n,
        "path": path,
        "key": key,
        "body_bytes": body.len(),
        "traceparent": traceparent,
    });
    (
        StatusCode::CREATED,
        [
            ("content-type", "application/json"),
            ("x-execution", &n.to_string()),
        ],
        answer.to_string(),
    )
        .into_response()
}

fn header(headers: &HeaderMap, name: &str) -> Option<String> {
    headers
        .get(name)
        .and_then(|v| v.to_str().ok())
        .map(str::to_owned)
}

/// Where the gateways keep their keys, and how many gateways share them.
pub enum Store {
    /// A fresh SQLite file, one gateway.
    Sqlite(tempfile::TempDir),
    /// A table of its own in the test PostgreSQL database, shared by `gateways` gateways.
    Postgres {
        url: String,
        table: String,
        gateways: usize,
    },
    /// A table of its own in the test MariaDB/MySQL database, one gateway.
    Mysql { url: String, table: String },
    /// A prefix of its own in the test Redis, one gateway.
    Redis { url: String, prefix: String },
}

impl Store {
    pub async fn sqlite() -> Self {
        Store::Sqlite(tempfile::tempdir().unwrap())
    }

    /// A fresh table named for the test, for `gateways` gateways.
    pub async fn postgres(test: &str, gateways: usize) -> Self {
        let url = std::env::var("GUESTLIST_TEST_POSTGRES_URL")
            .unwrap_or_else(|_| "postgres://postgres@127.0.0.1:5432/test".to_owned());
        let table = format!("gw_{test}");
        let pool = guestlist::sqlx::PgPool::connect(&url).await.unwrap_or_else(|err| {
            panic!("PostgreSQL at {url}: {err}. Run scripts/test.sh, which starts it, or set GUESTLIST_TEST_POSTGRES_URL.")
        });
        guestlist::sqlx::query(guestlist::sqlx::AssertSqlSafe(format!(
            "DROP TABLE IF EXISTS {table}"
        )))
        .execute(&pool)
        .await
        .unwrap();
        Store::Postgres {
            url,
            table,
            gateways,
        }
    }

    /// A fresh table named for the test in MariaDB/MySQL.
    pub async fn mysql(test: &str) -> Self {
        let url = std::env::var("GUESTLIST_TEST_MYSQL_URL")
            .unwrap_or_else(|_| "mysql://root@127.0.0.1:3306/test".to_owned());
        let table = format!("gw_{test}");
        let pool = guestlist::sqlx::MySqlPool::connect(&url).await.unwrap_or_else(|err| {
            panic!("MariaDB at {url}: {err}. Run scripts/test.sh, which starts it, or set GUESTLIST_TEST_MYSQL_URL.")
        });
        guestlist::sqlx::query(guestlist::sqlx::AssertSqlSafe(format!(
            "DROP TABLE IF EXISTS {table}"
        )))
        .execute(&pool)
        .await
        .unwrap();
        Store::Mysql { url, table }
    }

    /// A fresh prefix named for the test in Redis (its keys from an earlier run deleted).
    pub async fn redis(test: &str) -> Self {
        let url = std::env::var("GUESTLIST_TEST_REDIS_URL")
            .unwrap_or_else(|_| "redis://127.0.0.1:6379".to_owned());
        let prefix = format!("gltest:gw_{test}");
        let status = std::process::Command::new("redis-cli")
            .args(["-u", &url, "--scan", "--pattern", &format!("{prefix}:*")])
            .output()
            .unwrap_or_else(|err| {
                panic!("redis-cli: {err}. Run scripts/test.sh, which installs and starts Redis.")
            });
        assert!(
            status.status.success(),
            "Redis at {url}: {}",
            String::from_utf8_lossy(&status.stderr)
        );
        for name in String::from_utf8_lossy(&status.stdout).lines() {
            std::process::Command::new("redis-cli")
                .args(["-u", &url, "DEL", name])
                .output()
                .unwrap();
        }
        Store::Redis { url, prefix }
    }

    /// The server's URL, where the store has a server (not SQLite).
    pub fn url(&self) -> Option<&str> {
        match self {
            Store::Sqlite(_) => None,
            Store::Postgres { url, .. } | Store::Mysql { url, .. } | Store::Redis { url, .. } => {
                Some(url)
            }
        }
    }

    /// The same table (or prefix) reached at `url` instead: through a proxy.
    pub fn at(&self, url: String) -> Self {
        match self {
            Store::Sqlite(_) => panic!("SQLite has no server to reach elsewhere"),
            Store::Postgres {
                table, gateways, ..
            } => Store::Postgres {
                url,
                table: table.clone(),
                gateways: *gateways,
            },
            Store::Mysql { table, .. } => Store::Mysql {
                url,
                table: table.clone(),
            },
            Store::Redis { prefix, .. } => Store::Redis {
                url,
                prefix: prefix.clone(),
            },
        }
    }

    /// How many gateways share the store.
    pub fn gateways(&self) -> usize {
        match self {
            Store::Sqlite(_) | Store::Mysql { .. } | Store::Redis { .. } => 1,
            Store::Postgres { gateways, .. } => *gateways,
        }
    }

    /// `--database` and `--table` for the gateway.
    pub fn args(&self) -> Vec<String> {
        match self {
            Store::Sqlite(dir) => vec![
                "--database".into(),
                format!("sqlite:{}", dir.path().join("guestlist.db").display()),
            ],
            Store::Postgres { url, table, .. }
            | Store::Mysql { url, table }
            | Store::Redis { url, prefix: table } => {
                vec![
                    "--database".into(),
                    url.clone(),
                    "--table".into(),
                    table.clone(),
                ]
            }
        }
    }
}

/// The `guestlist gateway` process.
pub struct Gateway {
    child: Child,
    pub url: String,
    /// `/metrics` and `/healthz`, when `--metrics-listen` was given.
    pub ops: Option<String>,
    _lines: Lines<BufReader<ChildStdout>>,
}

impl Gateway {
    /// Starts a gateway in front of `upstream` on `store`, with `extra` flags.
    pub async fn start(upstream: &str, store: &Store, extra: &[&str]) -> Self {
        Self::start_with_env(upstream, store, extra, &[]).await
    }

    /// [`Gateway::start`] with `env` set in the gateway's environment.
    pub async fn start_with_env(
        upstream: &str,
        store: &Store,
        extra: &[&str],
        env: &[(&str, &str)],
    ) -> Self {
        let mut command = Command::new(env!("CARGO_BIN_EXE_guestlist"));
        command
            .envs(env.iter().copied())
            .args(["gateway", "--listen", "127.0.0.1:0", "--upstream", upstream])
            .args(store.args())
            .args(extra)
            .env("GUESTLIST_LOG", "warn")
            .env_remove("GUESTLIST_DATABASE_URL")
            .stdout(Stdio::piped())
            .kill_on_drop(true);
        let mut child = command.spawn().expect("start guestlist gateway");
        let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
        let (mut url, mut ops) = (None, None);
        let read = async {
            while let Some(line) = lines.next_line().await.unwrap() {
                if let Some(rest) = line.strip_prefix("metrics on ") {
                    ops = rest.split("/metrics").next().map(str::to_owned);
                }
                if let Some(rest) = line.strip_prefix("guestlist gateway on ") {
                    url = rest.split_whitespace().next().map(str::to_owned);
                    return;
                }
            }
        };
        tokio::time::timeout(PATIENCE, read)
            .await
            .expect("the gateway said where it listens");
        Self {
            child,
            url: url.expect("the gateway exited before it listened (its log is above)"),
            ops,
            _lines: lines,
        }
    }

    /// Kills the gateway with SIGKILL.
    /// The process id, to look at what the process holds.
    pub fn pid(&self) -> u32 {
        self.child.id().expect("running")
    }

    pub async fn sigkill(mut self) {
        self.child.kill().await.unwrap();
    }

    /// Sends SIGTERM and waits for the exit; `true` when it exited cleanly.
    pub async fn sigterm(mut self) -> bool {
        let pid = self.child.id().unwrap().to_string();
        std::process::Command::new("kill")
            .args(["-TERM", &pid])
            .status()
            .unwrap();
        tokio::time::timeout(PATIENCE, self.child.wait())
            .await
            .expect("the gateway stopped on SIGTERM")
            .unwrap()
            .success()
    }
}

/// The gateways of one test, all on one store: requests go to each in turn, so that with two
/// sharing PostgreSQL a retry usually lands on the other gateway.
pub struct Gateways {
    all: Vec<Gateway>,
    next: std::sync::atomic::AtomicUsize,
    upstream: String,
    extra: Vec<String>,
}

impl Gateways {
    /// As many gateways as the store says, in front of `upstream`, with `extra` flags.
    pub async fn start(upstream: &str, store: &Store, extra: &[&str]) -> Self {
        let mut all = Vec::new();
        for _ in 0..store.gateways() {
            all.push(Gateway::start(upstream, store, extra).await);
        }
        Self {
            all,
            next: Default::default(),
            upstream: upstream.to_owned(),
            extra: extra.iter().map(|s| s.to_string()).collect(),
        }
    }

    /// `path` on the gateways: each request to it goes to the next gateway in turn.
    pub fn route(&self, path: &str) -> Route<'_> {
        Route {
            gateways: self,
            path: path.to_owned(),
        }
    }

    /// `path` on every gateway.
    pub fn everywhere(&self, path: &str) -> Vec<String> {
        self.all
            .iter()
            .map(|g| format!("{}{path}", g.url))
            .collect()
    }

    /// The first gateway's `/metrics` and `/healthz` address.
    pub fn ops(&self) -> Option<String> {
        self.all[0].ops.clone()
    }

    /// SIGKILLs the first gateway and starts it again on `store`; the others keep running.
    pub async fn kill_and_restart_first(&mut self, store: &Store) {
        let killed = self.all.remove(0);
        killed.sigkill().await;
        let extra: Vec<&str> = self.extra.iter().map(String::as_str).collect();
        self.all
            .insert(0, Gateway::start(&self.upstream, store, &extra).await);
    }

    /// SIGTERMs every gateway; `true` when all exited cleanly.
    pub async fn sigterm_all(self) -> bool {
        let mut clean = true;
        for gateway in self.all {
            clean &= gateway.sigterm().await;
        }
        clean
    }
}

/// A path on a set of gateways.
pub struct Route<'a> {
    gateways: &'a Gateways,
    path: String,
}

/// Where a request goes: a fixed URL, or a route that picks the next gateway each time.
pub trait Target {
    fn url(&self) -> String;
}

impl Target for str {
    fn url(&self) -> String {
        self.to_owned()
    }
}

impl Target for String {
    fn url(&self) -> String {
        self.clone()
    }
}

impl Target for Route<'_> {
    fn url(&self) -> String {
        let all = &self.gateways.all;
        let i = self.gateways.next.fetch_add(1, Ordering::SeqCst) % all.len();
        format!("{}{}", all[i].url, self.path)
    }
}

/// One answer, read whole.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Answer {
    pub status: u16,
    pub replayed: bool,
    pub content_type: Option<String>,
    pub body: Vec<u8>,
}

impl Answer {
    pub fn json(&self) -> serde_json::Value {
        serde_json::from_slice(&self.body)
            .unwrap_or_else(|_| panic!("JSON: {}", String::from_utf8_lossy(&self.body)))
    }
}

/// POSTs `body` to `target` with `headers`.
pub async fn post(
    target: &(impl Target + ?Sized),
    headers: &[(&str, &str)],
    body: &'static [u8],
) -> Answer {
    let client = reqwest::Client::new();
    let mut request = client.post(target.url()).body(body);
    for (name, value) in headers {
        request = request.header(*name, *value);
    }
    let response = request.send().await.expect("the gateway answers");
    Answer {
        status: response.status().as_u16(),
        replayed: response.headers().get("idempotent-replayed").is_some(),
        content_type: header(response.headers(), "content-type"),
        body: response
            .bytes()
            .await
            .map(|b| b.to_vec())
            .unwrap_or_default(),
    }
}
