//! The `guestlist` binary running `gateway`, as users run it.

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};

use anyhow::Context;

/// A `guestlist gateway` process.
pub(super) struct Gateway {
    pub(super) url: String,
    /// The key table it made, which the bench drops once done.
    pub(super) table: String,
    child: Child,
}

/// The `guestlist` binary built beside this one.
fn binary() -> anyhow::Result<PathBuf> {
    let here = std::env::current_exe()?;
    let beside = here.with_file_name("guestlist");
    anyhow::ensure!(
        beside.exists(),
        "{} is missing: build it with the bench, `cargo build --release -p guestlist-cli -p guestlist-bench`",
        beside.display()
    );
    Ok(beside)
}

impl Gateway {
    /// Starts a gateway in front of `upstream` with its keys in `database` (a fresh table).
    pub(super) async fn start(
        upstream: &str,
        database: &str,
        scratch: &Path,
    ) -> anyhow::Result<Self> {
        let table = format!("bench_gateway_keys_{}", std::process::id());
        let mut child = Command::new(binary()?)
            .args(["gateway", "--listen", "127.0.0.1:0", "--upstream", upstream])
            .args(["--database", database, "--table", &table])
            .env("GUESTLIST_LOG", "warn")
            .current_dir(scratch)
            .stdout(Stdio::piped())
            .spawn()
            .context("cannot start guestlist gateway")?;
        let stdout = child.stdout.take().expect("piped");
        let url = tokio::task::spawn_blocking(move || {
            BufReader::new(stdout)
                .lines()
                .map_while(Result::ok)
                .find_map(|line| {
                    line.strip_prefix("guestlist gateway on ")
                        .and_then(|rest| rest.split_whitespace().next())
                        .map(str::to_owned)
                })
        })
        .await?
        .context("the gateway exited before it listened (its log is above)")?;
        Ok(Self { url, table, child })
    }
}

/// Stopped with the bench, however the bench ends.
impl Drop for Gateway {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
