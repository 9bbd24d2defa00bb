//! A child process whose wall clock is off by minutes (libfaketime, preloaded), so that a
//! story can show which clock judges a lease: the database's, never the process's.

use std::path::Path;

/// Where Debian's `faketime` package puts its library, per architecture.
const LIBRARIES: &[&str] = &[
    "/usr/lib/x86_64-linux-gnu/faketime/libfaketime.so.1",
    "/usr/lib/aarch64-linux-gnu/faketime/libfaketime.so.1",
];

/// The environment that sets a child's wall clock `offset` away from the real one (`"-10m"`,
/// `"+10m"`: libfaketime's relative form). The monotonic clock is left alone, so that the
/// child's timers and timeouts run at the real pace.
pub fn env(offset: &str) -> Vec<(&'static str, String)> {
    let library = LIBRARIES
        .iter()
        .find(|path| Path::new(path).exists())
        .unwrap_or_else(|| {
            panic!(
                "libfaketime is not installed: `apt-get install faketime` (scripts/test.sh \
                 installs it)"
            )
        });
    vec![
        ("LD_PRELOAD", (*library).to_owned()),
        ("FAKETIME", offset.to_owned()),
        ("FAKETIME_DONT_FAKE_MONOTONIC", "1".to_owned()),
        ("FAKETIME_NO_CACHE", "1".to_owned()),
    ]
}
