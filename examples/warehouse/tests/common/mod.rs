//! What the example's tests share: its binaries as child processes, read line by line, and
//! databases of their own.

#![allow(dead_code)] // each test binary uses the parts it needs

use std::process::Stdio;
use std::time::Duration;

use guestlist_testkit::{Database, Fixture};
use tokio::io::{AsyncBufReadExt, BufReader, Lines};
use tokio::process::{Child, ChildStdout, Command};
use warehouse_example::broker::Orders;
use warehouse_example::db::Shop;
use warehouse_example::picking::HANG_AFTER_CHARGE;

pub const PATIENCE: Duration = Duration::from_secs(60);

/// What the warehouse prints once ready, before its API's URL.
pub const WAREHOUSE_READY: &str = "warehouse API on ";
/// What payments prints once ready, before its URL.
pub const PAYMENTS_READY: &str = "payments on ";

/// One of the example's binaries, running, with its standard output read line by line.
pub struct Service {
    child: Child,
    lines: Lines<BufReader<ChildStdout>>,
    /// Where its HTTP API listens.
    pub url: String,
}

impl Service {
    /// Starts `command` and waits for the line that starts with `ready`, followed by the URL.
    /// That line means ready, so `/readyz` must answer 200 at once.
    pub async fn start(command: Command, ready: &str) -> Self {
        let service = Self::start_without_api(command, ready).await;
        let readyz = reqwest::get(format!("{}/readyz", service.url))
            .await
            .expect("the service answers once it says it is ready");
        assert_eq!(readyz.status(), 200, "/readyz once the line is printed");
        service
    }

    /// Starts `command`, a service with no HTTP API (the relay), and waits for the line that
    /// starts with `ready`; what follows it stands in for the URL.
    pub async fn start_without_api(command: Command, ready: &str) -> Self {
        Self::try_start_without_api(command, ready)
            .await
            .unwrap_or_else(|why| panic!("{why}"))
    }

    /// [`Service::start_without_api`], or why the service never said it was ready (it exited
    /// first, or said nothing for a minute), as a supervisor that starts it again would see it.
    pub async fn try_start_without_api(mut command: Command, ready: &str) -> Result<Self, String> {
        command
            // Warnings only, unless GUESTLIST_TEST_PART_LOG asks for more (a replay of a seed).
            .env(
                "RUST_LOG",
                std::env::var("GUESTLIST_TEST_PART_LOG").unwrap_or_else(|_| "warn".to_owned()),
            )
            .stdout(Stdio::piped())
            .kill_on_drop(true);
        let mut child = command.spawn().expect("start the binary");
        let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
        let url = match try_next_line(&mut lines, ready).await {
            Ok(url) => url,
            // Still running, and silent: where it waits.
            Err(why) if matches!(child.try_wait(), Ok(None)) => {
                let stacks = child.id().map(stacks).unwrap_or_default();
                let _ = child.kill().await;
                return Err(format!("{why}; where its threads were:\n{stacks}"));
            }
            Err(why) => return Err(why),
        };
        Ok(Self { child, lines, url })
    }

    /// Whether the process has exited (on its own: a crash, or an error it gave up on).
    pub fn exited(&mut self) -> bool {
        !matches!(self.child.try_wait(), Ok(None))
    }

    /// The rest of the next line that starts with `prefix`.
    pub async fn next_line(&mut self, prefix: &str) -> String {
        next_line(&mut self.lines, prefix).await
    }

    /// The process id, for signals other than SIGKILL and SIGTERM and for `/proc`.
    pub fn pid(&self) -> Option<u32> {
        self.child.id()
    }

    pub async fn sigkill(mut self) {
        self.child.kill().await.expect("SIGKILL the service");
    }

    pub async fn sigterm(self) {
        self.try_sigterm()
            .await
            .unwrap_or_else(|why| panic!("{why}"));
    }

    /// SIGTERM, then waits (a minute at most) for a clean exit; what went wrong otherwise (the
    /// process is killed then).
    pub async fn try_sigterm(mut self) -> Result<(), String> {
        let Some(pid) = self.child.id() else {
            return Err("it had exited before SIGTERM".to_owned());
        };
        let _ = std::process::Command::new("kill")
            .args(["-TERM", &pid.to_string()])
            .status();
        match tokio::time::timeout(PATIENCE, self.child.wait()).await {
            Ok(Ok(exit)) if exit.success() => Ok(()),
            Ok(Ok(exit)) => Err(format!("it did not exit cleanly on SIGTERM: {exit}")),
            Ok(Err(err)) => Err(format!("cannot wait for it: {err}")),
            Err(_) => {
                let stacks = stacks(pid);
                let _ = self.child.kill().await;
                Err(format!(
                    "it did not stop within {PATIENCE:?} of SIGTERM; where its threads were:\n{stacks}"
                ))
            }
        }
    }
}

/// The `warehouse` binary on `database`, consuming `orders`, charging through `payments`; with
/// `hang`, its handler stops after the charge and before its commit.
pub fn warehouse(database: &str, orders: &Orders, payments: &str, hang: bool) -> Command {
    let mut command = warehouse_on(database, orders, payments, "127.0.0.1:0");
    if hang {
        command.env(HANG_AFTER_CHARGE, "1");
    }
    command
}

/// The `warehouse` binary on `database`, consuming `orders`, charging through `payments`,
/// its API listening on `listen`.
pub fn warehouse_on(database: &str, orders: &Orders, payments: &str, listen: &str) -> Command {
    let mut command = Command::new(env!("CARGO_BIN_EXE_warehouse"));
    command
        .args(["--database", database, "--broker", &orders.url])
        .args(["--queue", &orders.name, "--payments", payments])
        .args(["--listen", listen, "--ack-wait", "2s"])
        // A killed warehouse's events wait out its hold on their steps: short, as the ack-wait.
        .args(["--step-lease", "3s"]);
    command
}

/// What the relay prints once running, before the name it holds the lease under.
pub const RELAY_READY: &str = "relay running as ";

/// The `relay` binary on `database`, publishing to `orders`' broker, with `lease`.
pub fn relay(database: &str, orders: &Orders, lease: &str) -> Command {
    let mut command = Command::new(env!("CARGO_BIN_EXE_relay"));
    command
        .args(["--database", database, "--broker", &orders.url])
        .args(["--queue", &orders.name, "--lease", lease]);
    command
}

/// An address on loopback no one listens on yet, for a service that keeps its address across
/// restarts, as one behind a fixed name does.
pub fn free_address() -> String {
    let probe = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    probe.local_addr().unwrap().to_string()
}

/// The `payments` binary on `database`.
pub fn payments(database: &str) -> Command {
    payments_on(database, "127.0.0.1:0")
}

/// The `payments` binary on `database`, listening on `listen`.
pub fn payments_on(database: &str, listen: &str) -> Command {
    let mut command = Command::new(env!("CARGO_BIN_EXE_payments"));
    command.args(["--database", database, "--listen", listen]);
    command
}

/// The rest of the first line of `lines` that starts with `prefix`.
async fn next_line(lines: &mut Lines<BufReader<ChildStdout>>, prefix: &str) -> String {
    try_next_line(lines, prefix)
        .await
        .unwrap_or_else(|why| panic!("{why}"))
}

/// [`next_line`], or why there was none.
async fn try_next_line(
    lines: &mut Lines<BufReader<ChildStdout>>,
    prefix: &str,
) -> Result<String, String> {
    let read = async {
        while let Ok(Some(line)) = lines.next_line().await {
            if let Some(rest) = line.strip_prefix(prefix) {
                return Ok(rest.to_owned());
            }
        }
        Err(format!(
            "the service exited before printing {prefix:?} (its log is above)"
        ))
    };
    tokio::time::timeout(PATIENCE, read)
        .await
        .unwrap_or_else(|_| {
            Err(format!(
                "the service printed no {prefix:?} within {PATIENCE:?}"
            ))
        })
}

/// Waits (at most `limit`) until `sql` counts at least `at`.
pub async fn until_at_least<DB: Fixture>(db: &Database<DB>, sql: &str, at: i64, limit: Duration) {
    let deadline = tokio::time::Instant::now() + limit;
    loop {
        let got = count(db, sql).await;
        if got >= at {
            return;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "{sql}: {got} after {limit:?}, want {at}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// Waits until `sql` counts `want`.
pub async fn eventually<DB: Fixture>(db: &Database<DB>, sql: &str, want: i64) {
    let deadline = tokio::time::Instant::now() + PATIENCE;
    loop {
        let got = db.scalar(sql.to_owned()).await;
        if got == want {
            return;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "{sql}: {got} after {PATIENCE:?}, want {want}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

pub async fn count<DB: Fixture>(db: &Database<DB>, sql: &str) -> i64 {
    db.scalar(sql.to_owned()).await
}

/// The reservations of the events that have a pick task: one each, however often an event
/// came back, since the reserve step's row commits with its journal.
pub async fn reservations_of_picks<DB: Fixture>(db: &Database<DB>) -> i64 {
    let sql = "SELECT count(*) FROM reservations r JOIN pick_tasks p ON p.event = r.event";
    count(db, sql).await
}

/// Payments, in this process, on `pool`; its base URL.
pub async fn start_payments<DB: Shop>(pool: guestlist::sqlx::Pool<DB>) -> String {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    warehouse_example::payments::migrate(&pool).await.unwrap();
    let app = warehouse_example::payments::router(pool, Default::default()).unwrap();
    tokio::spawn(async move { axum::serve(listener, app).await });
    url
}

/// A fresh SQLite file in `dir`.
pub async fn sqlite_file(dir: &tempfile::TempDir, name: &str) -> Database<guestlist::sqlx::Sqlite> {
    let path = dir.path().join(name);
    Database::attach(path.to_str().unwrap(), 2).await
}

/// The NATS server the tests use.
pub fn nats_url() -> String {
    std::env::var("GUESTLIST_TEST_NATS_URL").unwrap_or_else(|_| "nats://127.0.0.1:4222".to_owned())
}

/// The local SQS (moto) the tests use, as the example's `--broker` names it: `sqs://host:port`.
pub fn sqs_url() -> String {
    let endpoint = std::env::var("GUESTLIST_TEST_SQS_ENDPOINT")
        .unwrap_or_else(|_| "http://127.0.0.1:5000".to_owned());
    format!("sqs://{}", endpoint.trim_start_matches("http://"))
}

/// The RabbitMQ server the tests use.
pub fn amqp_url() -> String {
    std::env::var("GUESTLIST_TEST_AMQP_URL")
        .unwrap_or_else(|_| "amqp://guest:guest@127.0.0.1:5672/%2f".to_owned())
}

/// A PostgreSQL database of its own beside the test database, created empty and dropped when
/// this goes out of scope, a failed assertion included.
pub struct FreshDatabase {
    /// Its URL.
    pub url: String,
    name: String,
    admin_url: String,
}

impl FreshDatabase {
    /// Drops `name` if an earlier run left it, and creates it empty.
    pub async fn create(name: &str) -> Self {
        let admin = Database::<guestlist::sqlx::Postgres>::open(1).await;
        admin
            .exec(format!("DROP DATABASE IF EXISTS {name} WITH (FORCE)"))
            .await;
        admin.exec(format!("CREATE DATABASE {name}")).await;
        let (base, query) = admin.url.split_once('?').unwrap_or((&admin.url, ""));
        let (server, _) = base.rsplit_once('/').expect("a database URL");
        let url = if query.is_empty() {
            format!("{server}/{name}")
        } else {
            format!("{server}/{name}?{query}")
        };
        Self {
            url,
            name: name.to_owned(),
            admin_url: admin.url.clone(),
        }
    }
}

impl Drop for FreshDatabase {
    fn drop(&mut self) {
        // On a thread of its own: the test's runtime may be unwinding, or busy in this thread.
        let (admin_url, name) = (self.admin_url.clone(), self.name.clone());
        let dropped = std::thread::spawn(move || {
            let runtime = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .unwrap();
            runtime.block_on(async {
                let admin = Database::<guestlist::sqlx::Postgres>::attach(&admin_url, 1).await;
                admin
                    .exec(format!("DROP DATABASE IF EXISTS {name} WITH (FORCE)"))
                    .await;
            });
        })
        .join();
        if dropped.is_err() && !std::thread::panicking() {
            panic!("cannot drop the database {}", self.name);
        }
    }
}

/// Waits (at most `limit`) until the broker has shown nothing pending and no dead letter for
/// `quiet`: redeliveries of what was already handled have drained (a message handed back waits
/// up to its delay).
pub async fn until_the_broker_is_quiet(orders: &Orders, quiet: Duration, limit: Duration) {
    let deadline = tokio::time::Instant::now() + limit;
    let mut quiet_since = tokio::time::Instant::now();
    while quiet_since.elapsed() < quiet {
        let left = pending_on_the_broker(orders).await;
        if !left.is_empty() {
            quiet_since = tokio::time::Instant::now();
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "{}: left on the broker: {left:?}",
            orders.url
        );
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
}

/// What is still on the broker: messages not yet acknowledged, and dead letters.
pub async fn pending_on_the_broker(orders: &Orders) -> Vec<String> {
    orders
        .left_over()
        .await
        .unwrap_or_else(|err| panic!("what is left on {}: {err:#}", orders.url))
}

/// The functions on each thread's stack in process `pid` (through gdb, where the machine has
/// it), the runtime's and the standard library's left out: where a process that will not stop
/// is waiting.
fn stacks(pid: u32) -> String {
    let dumped = std::process::Command::new("gdb")
        .args([
            "-batch",
            "-ex",
            "thread apply all bt",
            "-p",
            &pid.to_string(),
        ])
        .output();
    let Ok(dumped) = dumped else {
        return "(no gdb on this machine)".to_owned();
    };
    String::from_utf8_lossy(&dumped.stdout)
        .lines()
        .filter(|line| line.starts_with("Thread ") || line.starts_with('#'))
        .filter(|line| {
            !line.contains(" tokio::") && !line.contains(" std::") && !line.contains(" core::")
        })
        .map(|line| line.split(" (").next().unwrap_or(line))
        .collect::<Vec<_>>()
        .join("\n")
}
