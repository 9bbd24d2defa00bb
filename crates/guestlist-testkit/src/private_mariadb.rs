//! A MariaDB server of one test's own (`mariadb-install-db` and `mariadbd` into a temporary
//! directory, on a port of its own), which the test may kill (SIGKILL: every session cut, no
//! flush beyond what committed, InnoDB's crash recovery at the next start) and start again,
//! without touching the server the other tests share.
//!
//! As root, the server runs as the `mysql` user (`--user=mysql`), as Debian's does.

use std::net::TcpStream;
use std::os::unix::net::UnixStream;
use std::process::{Child, Command, Stdio};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use tempfile::TempDir;

use crate::private_postgres::{free_port, server_dir};

/// A private MariaDB server, killed when dropped.
#[derive(Debug)]
pub struct PrivateMariadb {
    dir: TempDir,
    port: u16,
    as_mysql: bool,
    server: Mutex<Option<Child>>,
}

impl PrivateMariadb {
    /// Makes a data directory in a temporary directory, starts the server on a free loopback
    /// port, and creates the database `test`.
    pub fn start() -> Self {
        let (dir, as_mysql) = server_dir("guestlist-mariadb-", "mysql");
        let server = Self {
            port: free_port(),
            dir,
            as_mysql,
            server: Mutex::new(None),
        };
        server.install();
        server.start_again();
        let mut create = Command::new("mariadb");
        create.args([
            "--no-defaults",
            "-uroot",
            "--protocol=socket",
            &format!("--socket={}", server.socket()),
            "-e",
            "CREATE DATABASE IF NOT EXISTS test",
        ]);
        run(&mut create, "mariadb");
        server
    }

    /// Creates the system tables. The bootstrap failed once in a CI run under load
    /// ("Installation of system tables failed", its log gone with its directory): it is tried
    /// a second time on a fresh data directory, and a second failure says what the first said.
    fn install(&self) {
        let mut first = None;
        for _ in 0..2 {
            let mut install = Command::new("mariadb-install-db");
            install.args([
                "--no-defaults",
                &format!("--datadir={}", self.data()),
                "--auth-root-authentication-method=normal",
                "--skip-test-db",
            ]);
            if self.as_mysql {
                install.arg("--user=mysql");
            }
            let Err(said) = ran(&mut install, "mariadb-install-db") else {
                return;
            };
            eprintln!("mariadb-install-db failed; trying once more on a fresh directory:\n{said}");
            first.get_or_insert(said);
            let _ = std::fs::remove_dir_all(self.data());
            std::thread::sleep(Duration::from_secs(1));
        }
        panic!(
            "mariadb-install-db failed twice; the first time:\n{}",
            first.unwrap_or_default()
        );
    }

    /// A URL of the server's `test` database.
    pub fn url(&self) -> String {
        format!("mysql://root@127.0.0.1:{}/test", self.port)
    }

    /// Kills the server at once: every session cut; the next start recovers.
    pub fn kill(&self) {
        let mut server = self.server.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(mut child) = server.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    /// Starts the server (again), on the same port, and waits until it accepts connections.
    pub fn start_again(&self) {
        let mut command = Command::new("mariadbd");
        command
            .args([
                "--no-defaults".to_owned(),
                format!("--datadir={}", self.data()),
                format!("--port={}", self.port),
                "--bind-address=127.0.0.1".to_owned(),
                format!("--socket={}", self.socket()),
                format!("--pid-file={}/mariadbd.pid", self.dir()),
                format!("--log-error={}/error.log", self.dir()),
                "--innodb-buffer-pool-size=32M".to_owned(),
                "--max-connections=100".to_owned(),
                "--skip-name-resolve".to_owned(),
            ])
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null());
        if self.as_mysql {
            command.arg("--user=mysql");
        }
        let child = command.spawn().expect("start mariadbd");
        *self.server.lock().unwrap_or_else(|e| e.into_inner()) = Some(child);
        // Ready once both its listeners take a connection: the TCP port is listening a moment
        // before the socket the setup's client uses (a connection refused there once, in a CI
        // run under load). A server that exits meanwhile (its port taken since it was chosen)
        // is told at once, with its log.
        let started = Instant::now();
        loop {
            if TcpStream::connect(("127.0.0.1", self.port)).is_ok()
                && UnixStream::connect(self.socket()).is_ok()
            {
                break;
            }
            let exited = self
                .server
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .as_mut()
                .and_then(|child| child.try_wait().ok().flatten());
            if let Some(status) = exited {
                panic!(
                    "the private MariaDB exited at start ({status}); its log:\n{}",
                    std::fs::read_to_string(format!("{}/error.log", self.dir()))
                        .unwrap_or_default()
                );
            }
            assert!(
                started.elapsed() < Duration::from_secs(60),
                "the private MariaDB did not start; see {}/error.log",
                self.dir()
            );
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    fn dir(&self) -> String {
        self.dir.path().display().to_string()
    }

    fn data(&self) -> String {
        format!("{}/data", self.dir())
    }

    fn socket(&self) -> String {
        format!("{}/mariadbd.sock", self.dir())
    }
}

impl Drop for PrivateMariadb {
    fn drop(&mut self) {
        self.kill();
    }
}

/// Runs `command` and panics with its output if it fails.
fn run(command: &mut Command, program: &str) {
    if let Err(said) = ran(command, program) {
        panic!("{program}: {said}");
    }
}

/// Runs `command`; what it said (its output) if it failed.
fn ran(command: &mut Command, program: &str) -> Result<(), String> {
    let output = command
        .output()
        .unwrap_or_else(|err| panic!("{program}: {err}"));
    if output.status.success() {
        return Ok(());
    }
    Err(format!(
        "{}{}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    ))
}
