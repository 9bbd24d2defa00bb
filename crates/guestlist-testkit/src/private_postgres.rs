//! A PostgreSQL server of one test's own (`initdb` and `pg_ctl` into a temporary directory, on a
//! port of its own), which the test may stop the hard way (`pg_ctl stop -m immediate`: every
//! session cut, no checkpoint, crash recovery at the next start) and start again, without
//! touching the server the other tests share.
//!
//! PostgreSQL refuses to run as root: as root, the cluster belongs to the `postgres` user and
//! its commands run through `runuser`.

use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::Command;

use tempfile::TempDir;

/// Where Debian's packages put each major version's programs.
const DEBIAN_LIBS: &str = "/usr/lib/postgresql";

/// How many ports the first start tries before it gives up.
const PORT_TRIES: usize = 3;

/// What the server's log says when its port was taken before it could bind it.
const PORT_TAKEN: &str = "could not bind";

/// A private PostgreSQL cluster, stopped when dropped.
#[derive(Debug)]
pub struct PrivatePostgres {
    dir: TempDir,
    bin: PathBuf,
    port: u16,
    as_postgres: bool,
}

impl PrivatePostgres {
    /// Makes a cluster in a temporary directory and starts it on a free loopback port.
    ///
    /// A port free when picked can be taken before the server binds it (another test's server,
    /// an outgoing connection's ephemeral port): the first start then tries another port, up to
    /// three times.
    pub fn start() -> Self {
        let bin = programs();
        let (dir, as_postgres) = server_dir("guestlist-pg-", "postgres");
        let port = free_port();
        let mut cluster = Self {
            dir,
            bin,
            port,
            as_postgres,
        };
        cluster.run(
            "initdb",
            &[
                "-D",
                &cluster.data(),
                "-U",
                "postgres",
                "-A",
                "trust",
                "-E",
                "UTF8",
                "--locale=C",
                "--no-sync",
            ],
        );
        for _ in 1..PORT_TRIES {
            match cluster.try_start() {
                Ok(()) => return cluster,
                Err(failure) if failure.contains(PORT_TAKEN) => cluster.port = free_port(),
                Err(failure) => panic!("{failure}"),
            }
        }
        cluster.start_again();
        cluster
    }

    /// A URL of the cluster's `postgres` database.
    pub fn url(&self) -> String {
        format!("postgres://postgres@127.0.0.1:{}/postgres", self.port)
    }

    /// Stops the server at once (`-m immediate`): every session cut, nothing flushed beyond
    /// what committed; the next start recovers from the write-ahead log.
    pub fn stop_immediately(&self) {
        self.run(
            "pg_ctl",
            &["-D", &self.data(), "-m", "immediate", "-w", "stop"],
        );
    }

    /// Starts the server (again), on the same port, and waits until it accepts connections.
    pub fn start_again(&self) {
        if let Err(failure) = self.try_start() {
            panic!("{failure}");
        }
    }

    /// Starts the server on its port: what `pg_ctl` and the server's log said if it did not.
    fn try_start(&self) -> Result<(), String> {
        let options = format!(
            "-p {} -k {} -c listen_addresses=127.0.0.1 -c max_connections=60 \
             -c shared_buffers=16MB",
            self.port,
            self.socket_dir()
        );
        let log = format!("{}/server.log", self.socket_dir());
        self.try_run(
            "pg_ctl",
            &[
                "-D",
                &self.data(),
                "-l",
                &log,
                "-o",
                &options,
                "-w",
                "start",
            ],
        )
        .map_err(|failure| {
            let said = std::fs::read_to_string(&log).unwrap_or_default();
            let tail: Vec<&str> = said.lines().rev().take(20).collect();
            let tail: Vec<&str> = tail.into_iter().rev().collect();
            format!("{failure}\nthe server's log ends:\n{}", tail.join("\n"))
        })
    }

    fn data(&self) -> String {
        format!("{}/data", self.socket_dir())
    }

    fn socket_dir(&self) -> String {
        self.dir.path().display().to_string()
    }

    /// Runs one of the cluster's programs and panics with its output if it fails.
    fn run(&self, program: &str, args: &[&str]) {
        if let Err(failure) = self.try_run(program, args) {
            panic!("{failure}");
        }
    }

    /// Runs one of the cluster's programs: its output if it failed.
    fn try_run(&self, program: &str, args: &[&str]) -> Result<(), String> {
        let output = self
            .command(program)
            .args(args)
            .output()
            .unwrap_or_else(|err| panic!("{program}: {err}"));
        if output.status.success() {
            return Ok(());
        }
        Err(format!(
            "{program} {args:?}: {}{}",
            String::from_utf8_lossy(&output.stdout),
            String::from_utf8_lossy(&output.stderr)
        ))
    }

    /// One of the cluster's programs, to run as `postgres` when we are root.
    fn command(&self, program: &str) -> Command {
        let program = self.bin.join(program);
        let mut command = if self.as_postgres {
            let mut command = Command::new("runuser");
            command.args(["-u", "postgres", "--"]).arg(program);
            command
        } else {
            Command::new(program)
        };
        command.current_dir(self.dir.path());
        command
    }
}

impl Drop for PrivatePostgres {
    fn drop(&mut self) {
        if Path::new(&self.data()).join("postmaster.pid").exists() {
            let _ = self
                .command("pg_ctl")
                .args(["-D", &self.data(), "-m", "immediate", "-w", "stop"])
                .output();
        }
    }
}

/// The newest PostgreSQL's programs: `GUESTLIST_TEST_PG_BIN`, or Debian's newest version.
fn programs() -> PathBuf {
    if let Ok(bin) = std::env::var("GUESTLIST_TEST_PG_BIN") {
        return PathBuf::from(bin);
    }
    let newest = std::fs::read_dir(DEBIAN_LIBS)
        .ok()
        .into_iter()
        .flatten()
        .filter_map(|entry| entry.ok()?.file_name().to_str()?.parse::<u32>().ok())
        .max()
        .unwrap_or_else(|| {
            panic!(
                "no PostgreSQL programs under {DEBIAN_LIBS}: install postgresql (scripts/test.sh \
                 does), or set GUESTLIST_TEST_PG_BIN to the directory that holds initdb and pg_ctl"
            )
        });
    Path::new(DEBIAN_LIBS).join(newest.to_string()).join("bin")
}

/// A temporary directory for a server's files, named from `prefix`, given to `user` when this
/// process runs as root (the server then runs as `user`): the directory, and whether it was.
pub(crate) fn server_dir(prefix: &str, user: &str) -> (TempDir, bool) {
    let dir = tempfile::Builder::new()
        .prefix(prefix)
        .tempdir()
        .expect("a temporary directory");
    let as_root = running_as_root();
    if as_root {
        let chown = Command::new("chown")
            .args(["-R", &format!("{user}:{user}")])
            .arg(dir.path())
            .status()
            .expect("chown");
        assert!(chown.success(), "chown the server's directory to {user}");
    }
    (dir, as_root)
}

/// `true` when this process runs as root (uid 0).
fn running_as_root() -> bool {
    std::fs::read_to_string("/proc/self/status").is_ok_and(|status| {
        status
            .lines()
            .find_map(|line| line.strip_prefix("Uid:"))
            .and_then(|ids| ids.split_whitespace().next())
            == Some("0")
    })
}

/// A loopback port free now, for a server of a test's own.
pub fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .and_then(|listener| listener.local_addr())
        .expect("a free loopback port")
        .port()
}
