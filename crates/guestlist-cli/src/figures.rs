//! Ages and sizes as the program prints them for people.

use std::time::Duration;

use crate::database;

/// An age for people, in whole seconds; `-` when there is none.
pub(crate) fn age(age: Option<Duration>) -> String {
    age.map_or_else(
        || "-".to_owned(),
        |age| humantime::format_duration(Duration::from_secs(age.as_secs())).to_string(),
    )
}

/// A table's size for people, saying what the figure covers on `url`'s database.
pub(crate) fn size(bytes: Option<u64>, url: &str) -> String {
    let figure = mib(bytes);
    let covers = if url.starts_with("sqlite") {
        " (the whole database file)"
    } else if database::is_redis(url) {
        " (in memory)"
    } else {
        ""
    };
    format!("{figure}{covers}")
}

/// A size in MiB for people; `-` when unknown.
pub(crate) fn mib(bytes: Option<u64>) -> String {
    bytes.map_or_else(
        || "-".to_owned(),
        |b| format!("{:.1} MiB", b as f64 / 1048576.0),
    )
}
