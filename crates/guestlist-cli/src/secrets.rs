//! The secrets a program reads from its environment or a file of its own, never from a settings
//! file (often not kept secret): the sealing keys and the key-hashing secret that the gateway
//! stores keys with, and that `guestlist keys` and the console read them back with.

use std::path::PathBuf;

use anyhow::Context;

/// The sealing keys: from the file named, else from `GUESTLIST_SEALING_KEYS`, else none. The
/// keys themselves never go in the settings file, which is often not kept secret.
pub(crate) fn sealing(file: Option<PathBuf>) -> anyhow::Result<Option<guestlist::keys::Sealing>> {
    let keys = match file {
        Some(path) => std::fs::read_to_string(&path)
            .with_context(|| format!("cannot read the sealing keys in {}", path.display()))?,
        None => match std::env::var("GUESTLIST_SEALING_KEYS") {
            Ok(keys) => keys,
            Err(_) => return Ok(None),
        },
    };
    Ok(Some(guestlist::keys::Sealing::parse(&keys)?))
}

/// The secret that stores keys as keyed hashes, from `GUESTLIST_KEY_HASHING_SECRET` (never the
/// settings file), if set.
pub(crate) fn key_hashing() -> anyhow::Result<Option<guestlist::keys::KeyHashing>> {
    match std::env::var("GUESTLIST_KEY_HASHING_SECRET") {
        Ok(secret) => Ok(Some(
            guestlist::keys::KeyHashing::parse(&secret).context("GUESTLIST_KEY_HASHING_SECRET")?,
        )),
        Err(_) => Ok(None),
    }
}
