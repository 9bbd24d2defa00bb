//! The peer the gateway is measured against: `idempotent-proxy-server` (crates.io), the one
//! open-source idempotency proxy that installs here, on the same Redis.

use std::path::PathBuf;
use std::process::{Command, Stdio};

use super::spawned::{Spawned, Stop, free_port};

/// The version measured.
const VERSION: &str = "1.2.2";
/// Its binary's name.
const BINARY: &str = "idempotent-proxy-server";
/// The path it maps to the upstream (`URL_<NAME>` in its environment).
pub(super) const ROUTE: &str = "URL_CHARGES";

/// Where the binary is: on `PATH`, in cargo's bin directory, or installed now.
fn binary() -> anyhow::Result<PathBuf> {
    let cargo_bin = std::env::var_os("CARGO_HOME")
        .map(PathBuf::from)
        .or_else(|| std::env::var_os("HOME").map(|home| PathBuf::from(home).join(".cargo")))
        .map(|home| home.join("bin").join(BINARY));
    let on_path = std::env::var_os("PATH")
        .into_iter()
        .flat_map(|paths| std::env::split_paths(&paths).collect::<Vec<_>>())
        .map(|dir| dir.join(BINARY));
    if let Some(found) = on_path.chain(cargo_bin.clone()).find(|path| path.exists()) {
        return Ok(found);
    }
    let install = format!("cargo install --locked {BINARY}@{VERSION}");
    eprintln!("{BINARY} is missing: installing it ({install}, a few minutes) …");
    let installed = Command::new("cargo")
        .args(["install", "--locked", &format!("{BINARY}@{VERSION}")])
        .status();
    match (installed, cargo_bin) {
        (Ok(status), Some(path)) if status.success() && path.exists() => Ok(path),
        _ => anyhow::bail!(
            "{BINARY} {VERSION} is not installed and could not be installed here; the gateway \
             bench measures against it. Install it with `{install}` and run the bench again"
        ),
    }
}

/// Starts an `idempotent-proxy-server` of its own on a free loopback port, in front of
/// `upstream_url` (the whole URL one route maps to), keeping its locks and answers in
/// `redis_url` for an hour, so that replays stay replays for the whole bench.
pub(super) async fn start(upstream_url: &str, redis_url: &str) -> anyhow::Result<Spawned> {
    let binary = binary()?;
    let dir = tempfile::tempdir()?;
    let port = free_port()?;
    // It reads its settings from the environment after loading `.env`, and panics when the
    // file is missing.
    std::fs::write(
        dir.path().join(".env"),
        "# settings come from the environment\n",
    )?;
    let mut command = Command::new(&binary);
    command
        .current_dir(dir.path())
        .env("SERVER_ADDR", format!("127.0.0.1:{port}"))
        .env("REDIS_URL", redis_url)
        .env(ROUTE, upstream_url)
        .env("REQUEST_TIMEOUT", "3600000")
        .env("LOG_LEVEL", "error")
        .stdout(Stdio::null());
    Spawned::start(command, BINARY, port, dir, Stop::Kill).await
}
