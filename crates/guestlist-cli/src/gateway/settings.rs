//! The gateway's settings, checked: flags, then environment variables, then a TOML file, then
//! defaults, each read into its value.

use std::net::SocketAddr;
use std::time::Duration;

use anyhow::{Context, bail};
use axum::http::{Method, StatusCode};
use guestlist::http::KeySource;

use super::args::GatewayArgs;
use super::parse::{ScopeFrom, bytes, duration, duration_or_zero, key_from, methods, scope_from};

/// The gateway's settings, checked.
#[derive(Debug, Clone)]
pub(crate) struct Settings {
    pub(crate) listen: String,
    pub(crate) upstream: url::Url,
    pub(crate) database: String,
    pub(crate) table: String,
    pub(crate) key_from: KeySource,
    pub(crate) scope_from: ScopeFrom,
    pub(crate) require_key: bool,
    pub(crate) methods: Vec<Method>,
    pub(crate) lease: Duration,
    pub(crate) in_flight_wait: Duration,
    pub(crate) upstream_timeout: Duration,
    pub(crate) retention: Duration,
    pub(crate) max_body: usize,
    pub(crate) mismatch_status: StatusCode,
    pub(crate) metrics_listen: Option<SocketAddr>,
    pub(crate) replay_cache: usize,
    pub(crate) replay_cache_entries: u64,
    pub(crate) replay_cache_ttl: Duration,
    pub(crate) header_timeout: Duration,
    pub(crate) body_timeout: Duration,
    pub(crate) max_connections: usize,
    pub(crate) max_in_flight_per_scope: Option<u64>,
    pub(crate) max_keys_per_scope: Option<u64>,
    pub(crate) sealing: Option<guestlist::keys::Sealing>,
    pub(crate) key_hashing: Option<guestlist::keys::KeyHashing>,
}

impl Settings {
    /// Flags and environment (already merged by clap) over the file over the defaults,
    /// checked.
    pub(crate) fn resolve(args: GatewayArgs) -> anyhow::Result<Self> {
        let set = args.layered()?;
        let upstream = set.upstream.context(
            "the gateway needs the service it stands in front of: --upstream http://host:port \
             (or GUESTLIST_GATEWAY_UPSTREAM, or upstream = \"…\" in the --config file)",
        )?;
        let upstream = url::Url::parse(&upstream)
            .ok()
            .filter(|url| matches!(url.scheme(), "http" | "https") && url.has_host())
            .with_context(|| {
                format!("--upstream {upstream:?} is not an http:// or https:// URL")
            })?;
        let lease = defaulted_duration("lease", set.lease)?;
        // The lease runs from the claim, the timeout from the send, and the answer is stored
        // after it: leave the attempt a margin to finish inside its lease.
        let margin = Duration::from_secs(1).min(lease / 2);
        let upstream_timeout = match set.upstream_timeout {
            Some(text) => duration("upstream-timeout", &text)?,
            None if lease >= Duration::from_secs(10) => lease - Duration::from_secs(5),
            None => lease / 2,
        };
        if upstream_timeout + margin > lease {
            bail!(
                "--upstream-timeout ({}) must end at least {} before --lease ({}): a retry may take \
                 over a key once its lease ends, so the first attempt must be over and stored by then",
                humantime::format_duration(upstream_timeout),
                humantime::format_duration(margin),
                humantime::format_duration(lease)
            );
        }
        let retention = defaulted_duration("retention", set.retention)?;
        let replay_cache_ttl = defaulted_duration("replay-cache-ttl", set.replay_cache_ttl)?;
        if replay_cache_ttl > retention {
            bail!(
                "--replay-cache-ttl ({}) must not exceed --retention ({}): a gateway would replay \
                 keys the database has already forgotten",
                humantime::format_duration(replay_cache_ttl),
                humantime::format_duration(retention)
            );
        }
        let max_connections = defaulted("max-connections", set.max_connections)?;
        anyhow::ensure!(
            max_connections > 0,
            "--max-connections must be above zero: it keeps slow clients from holding every \
             connection the gateway may open"
        );
        let mismatch = defaulted("mismatch-status", set.mismatch_status)?;
        let mismatch_status = StatusCode::from_u16(mismatch)
            .ok()
            .filter(StatusCode::is_client_error)
            .with_context(|| {
                format!("--mismatch-status {mismatch}: use a 4xx status, 422 or 400")
            })?;
        Ok(Self {
            listen: defaulted("listen", set.listen)?,
            upstream,
            database: defaulted("database", set.database)?,
            table: defaulted("table", set.table)?,
            key_from: key_from(Some(&defaulted("key-from", set.key_from)?))?,
            scope_from: scope_from(&defaulted("scope-from", set.scope_from)?)?,
            require_key: defaulted("require-key", set.require_key)?,
            methods: methods(&defaulted("methods", set.methods)?)?,
            lease,
            in_flight_wait: duration_or_zero(
                "in-flight-wait",
                &defaulted("in-flight-wait", set.in_flight_wait)?,
            )?,
            upstream_timeout,
            retention,
            max_body: defaulted_bytes("max-body", set.max_body)?,
            mismatch_status,
            replay_cache: defaulted_bytes("replay-cache", set.replay_cache)?,
            replay_cache_entries: defaulted("replay-cache-entries", set.replay_cache_entries)?,
            replay_cache_ttl,
            header_timeout: defaulted_duration("header-timeout", set.header_timeout)?,
            body_timeout: defaulted_duration("body-timeout", set.body_timeout)?,
            max_connections,
            max_in_flight_per_scope: set.max_in_flight_per_scope,
            max_keys_per_scope: set.max_keys_per_scope,
            sealing: crate::secrets::sealing(set.sealing_keys_file)?,
            key_hashing: crate::secrets::key_hashing()?,
            metrics_listen: match set.metrics_listen {
                Some(addr) => Some(addr.parse().with_context(|| {
                    format!("--metrics-listen {addr:?} is not an address like 127.0.0.1:9090")
                })?),
                None => None,
            },
        })
    }
}

/// A duration setting [`DEFAULTS`] gives a value, read.
fn defaulted_duration(name: &str, value: Option<String>) -> anyhow::Result<Duration> {
    duration(name, &defaulted(name, value)?)
}

/// A size setting [`DEFAULTS`] gives a value, read.
fn defaulted_bytes(name: &str, value: Option<String>) -> anyhow::Result<usize> {
    bytes(name, &defaulted(name, value)?)
}

/// A setting [`DEFAULTS`] gives a value, as the layers left it.
fn defaulted<T>(name: &str, value: Option<T>) -> anyhow::Result<T> {
    value.with_context(|| format!("--{name} has no value and no default"))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn args() -> GatewayArgs {
        GatewayArgs {
            upstream: Some("http://127.0.0.1:3000".into()),
            ..GatewayArgs::default()
        }
    }

    #[test]
    fn defaults_are_the_documented_ones() {
        let s = Settings::resolve(args()).unwrap();
        assert_eq!(s.listen, "127.0.0.1:8080");
        assert_eq!(s.database, "sqlite:guestlist.db");
        assert_eq!(s.key_from, KeySource::default());
        assert_eq!(s.scope_from, ScopeFrom::Authorization);
        assert_eq!(s.methods, [Method::POST, Method::PATCH]);
        assert_eq!(s.lease, Duration::from_secs(30));
        assert_eq!(s.upstream_timeout, Duration::from_secs(25));
        let short = Settings::resolve(GatewayArgs {
            lease: Some("4s".into()),
            ..args()
        })
        .unwrap();
        assert_eq!(
            short.upstream_timeout,
            Duration::from_secs(2),
            "half a short lease"
        );
        assert_eq!(s.retention, Duration::from_secs(24 * 3600));
        assert_eq!(s.max_body, 1024 * 1024);
        assert_eq!(s.mismatch_status, StatusCode::UNPROCESSABLE_ENTITY);
        assert!(!s.require_key);
        assert!(s.metrics_listen.is_none());
        assert_eq!(s.replay_cache, 64 * 1024 * 1024);
        assert_eq!(s.replay_cache_entries, 100_000);
        assert_eq!(s.replay_cache_ttl, Duration::from_secs(60));
        assert_eq!(s.in_flight_wait, Duration::ZERO, "409 at once unless set");
    }

    #[test]
    fn the_file_fills_in_and_flags_win() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("gateway.toml");
        std::fs::write(
            &path,
            "upstream = \"http://file:1\"\nlease = \"1m\"\nkey-from = \"json:/id\"\nrequire-key = true\n",
        )
        .unwrap();
        let s = Settings::resolve(GatewayArgs {
            config: Some(path.clone()),
            lease: Some("2m".into()),
            ..GatewayArgs::default()
        })
        .unwrap();
        assert_eq!(s.upstream.as_str(), "http://file:1/");
        assert_eq!(s.lease, Duration::from_secs(120), "the flag wins");
        assert_eq!(s.key_from, KeySource::JsonPointer("/id".into()));
        assert!(s.require_key);
        std::fs::write(&path, "upstrem = \"http://typo:1\"\n").unwrap();
        let err = Settings::resolve(GatewayArgs {
            config: Some(path),
            ..args()
        })
        .unwrap_err();
        assert!(format!("{err:#}").contains("upstrem"), "{err:#}");
    }

    #[test]
    fn bad_settings_say_what_to_use() {
        for (bad, says) in [
            (
                GatewayArgs {
                    upstream: None,
                    ..args()
                },
                "--upstream",
            ),
            (
                GatewayArgs {
                    upstream: Some("ftp://x".into()),
                    ..args()
                },
                "http://",
            ),
            (
                GatewayArgs {
                    key_from: Some("cookie:x".into()),
                    ..args()
                },
                "body-sha256",
            ),
            (
                GatewayArgs {
                    scope_from: Some("ip".into()),
                    ..args()
                },
                "header:NAME",
            ),
            (
                GatewayArgs {
                    lease: Some("soon".into()),
                    ..args()
                },
                "30s",
            ),
            (
                GatewayArgs {
                    max_body: Some("big".into()),
                    ..args()
                },
                "1MiB",
            ),
            (
                GatewayArgs {
                    mismatch_status: Some(200),
                    ..args()
                },
                "4xx",
            ),
            (
                GatewayArgs {
                    lease: Some("10s".into()),
                    upstream_timeout: Some("9500ms".into()),
                    ..args()
                },
                "1s before --lease",
            ),
            (
                GatewayArgs {
                    replay_cache_ttl: Some("2h".into()),
                    retention: Some("1h".into()),
                    ..args()
                },
                "must not exceed --retention",
            ),
        ] {
            let err = format!("{:#}", Settings::resolve(bad).unwrap_err());
            assert!(err.contains(says), "{err:?} should say {says:?}");
        }
    }
}
