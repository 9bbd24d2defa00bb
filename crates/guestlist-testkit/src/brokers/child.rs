//! A story's child process: the test binary itself, running one ignored test of the story's
//! module, told the story's tag and database through its environment. The stories start
//! consumers and relays this way so that they can kill them (SIGKILL, SIGTERM, SIGSTOP).

use std::process::{Child, Command, Stdio};

use crate::Fixture;
use crate::brokers::{Broker, Rig};

/// The environment variable a child reads its story's tag from.
const TAG: &str = "GUESTLIST_CHILD_TAG";
/// The environment variable a child reads its story's database URL from.
const DB: &str = "GUESTLIST_CHILD_DB";

impl<B: Broker, DB: Fixture> Rig<B, DB> {
    /// Starts the child test `child` of the module the story `name` runs in (the part of `name`
    /// before its first `_`, as the suite macros name them), on this rig, with `env` besides.
    pub fn child(&self, name: &str, child: &str, env: &[(&str, String)]) -> Child {
        let module = name.split('_').next().unwrap();
        let mut command = Command::new(std::env::current_exe().unwrap());
        command
            .args([&format!("{module}::{child}"), "--exact", "--ignored"])
            .env(TAG, &self.tag)
            .env(self::DB, &self.db.url)
            .stdout(Stdio::null());
        for (var, value) in env {
            command.env(var, value);
        }
        command
            .spawn()
            .unwrap_or_else(|err| panic!("start {child}: {err}"))
    }
}

/// A child process that is killed when dropped, so that a story failing midway (a panic in
/// its publisher, an assertion) leaves none of its consumers running after it.
pub struct Running(pub Child);

impl Drop for Running {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// In the child test `child`: the tag and database URL its story gave it; `None`, with a line
/// saying why, when it runs on its own (as `--ignored` alone would run it).
pub fn parent(child: &str) -> Option<(String, String)> {
    match (std::env::var(TAG), std::env::var(DB)) {
        (Ok(tag), Ok(url)) => Some((tag, url)),
        _ => {
            eprintln!("{child} runs only as a story's child process");
            None
        }
    }
}

/// The `guestlist` program built beside the running test binary (cargo builds it with the
/// workspace's tests), for the stories that drive it as an operator would.
pub fn guestlist_program() -> std::path::PathBuf {
    let exe = std::env::current_exe().unwrap();
    // target/<profile>/deps/<test binary>: the program is in target/<profile>.
    let program = exe
        .parent()
        .and_then(std::path::Path::parent)
        .map(|dir| dir.join(format!("guestlist{}", std::env::consts::EXE_SUFFIX)))
        .unwrap();
    assert!(
        program.exists(),
        "{} is not built: run the workspace's tests (`cargo nextest run --workspace \
         --all-features`), or `cargo build -p guestlist-cli --all-features` first",
        program.display()
    );
    program
}
