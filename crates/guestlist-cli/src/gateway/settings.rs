//! The gateway's settings: flags, then environment variables, then a TOML file, then defaults.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::time::Duration;

use anyhow::{Context, bail};
use axum::http::{HeaderName, Method, StatusCode};
use clap::Args;
use guestlist::http::KeySource;
use serde::Deserialize;

/// `guestlist gateway`'s flags. Every one can also be set by its environment variable or, by
/// its name, in the TOML file given with `--config`.
#[derive(Debug, Args, Default)]
pub(crate) struct GatewayArgs {
    /// A TOML file of settings named like the flags (listen = "127.0.0.1:8080"); flags and
    /// environment variables win over it.
    #[arg(long, env = "GUESTLIST_GATEWAY_CONFIG")]
    pub(crate) config: Option<PathBuf>,
    /// Where the gateway listens [default: 127.0.0.1:8080].
    #[arg(long, env = "GUESTLIST_GATEWAY_LISTEN")]
    pub(crate) listen: Option<String>,
    /// The service behind the gateway, e.g. http://127.0.0.1:3000.
    #[arg(long, env = "GUESTLIST_GATEWAY_UPSTREAM")]
    pub(crate) upstream: Option<String>,
    /// postgres://…, mysql://… (or mariadb://…), sqlite:PATH or redis://host:port
    /// [default: sqlite:guestlist.db].
    #[arg(long, env = "GUESTLIST_DATABASE_URL")]
    pub(crate) database: Option<String>,
    /// The key table; on Redis, the prefix of its keys [default: guestlist_keys].
    #[arg(long, env = "GUESTLIST_GATEWAY_TABLE")]
    pub(crate) table: Option<String>,
    /// Where the key is: header:NAME, json:/pointer (a field of the raw body) or body-sha256
    /// [default: header:Idempotency-Key].
    #[arg(long, env = "GUESTLIST_GATEWAY_KEY_FROM")]
    pub(crate) key_from: Option<String>,
    /// Whose key it is: authorization (a hash of the Authorization header), header:NAME (its
    /// value), or none (one namespace for every client) [default: authorization].
    #[arg(long, env = "GUESTLIST_GATEWAY_SCOPE_FROM")]
    pub(crate) scope_from: Option<String>,
    /// Refuse keyed methods without a key (400) instead of passing them through.
    #[arg(long, env = "GUESTLIST_GATEWAY_REQUIRE_KEY", num_args = 0..=1, default_missing_value = "true")]
    pub(crate) require_key: Option<bool>,
    /// The methods whose requests are keyed [default: POST,PATCH].
    #[arg(long, env = "GUESTLIST_GATEWAY_METHODS")]
    pub(crate) methods: Option<String>,
    /// How long a request holds its key before a retry may take over [default: 30s].
    #[arg(long, env = "GUESTLIST_GATEWAY_LEASE")]
    pub(crate) lease: Option<String>,
    /// How long the upstream may take to answer a keyed request; must end 1 s (or half the
    /// lease, if less) before the lease [default: the lease minus 5 s; half the lease under
    /// 10 s]. Unkeyed requests are not limited.
    #[arg(long, env = "GUESTLIST_GATEWAY_UPSTREAM_TIMEOUT")]
    pub(crate) upstream_timeout: Option<String>,
    /// How long keys and their responses are kept [default: 24h].
    #[arg(long, env = "GUESTLIST_GATEWAY_RETENTION")]
    pub(crate) retention: Option<String>,
    /// The largest request body on a keyed request, and the largest response stored for replay
    /// [default: 1MiB].
    #[arg(long, env = "GUESTLIST_GATEWAY_MAX_BODY")]
    pub(crate) max_body: Option<String>,
    /// The status for a key reused with another request: 422, or 400 as Stripe answers
    /// [default: 422].
    #[arg(long, env = "GUESTLIST_GATEWAY_MISMATCH_STATUS")]
    pub(crate) mismatch_status: Option<u16>,
    /// Where /metrics (Prometheus text) and /healthz listen; off unless set.
    #[arg(long, env = "GUESTLIST_GATEWAY_METRICS_LISTEN")]
    pub(crate) metrics_listen: Option<String>,
    /// Memory for stored responses already replayed once, so that further retries skip the
    /// database; 0 turns it off [default: 64MiB].
    #[arg(long, env = "GUESTLIST_GATEWAY_REPLAY_CACHE")]
    pub(crate) replay_cache: Option<String>,
    /// How long a response stays in that memory: a key evicted by an operator may still be
    /// replayed by a gateway for this long [default: 60s].
    #[arg(long, env = "GUESTLIST_GATEWAY_REPLAY_CACHE_TTL")]
    pub(crate) replay_cache_ttl: Option<String>,
    /// How long a client may take to send a request's headers before its connection is closed
    /// [default: 10s].
    #[arg(long, env = "GUESTLIST_GATEWAY_HEADER_TIMEOUT")]
    pub(crate) header_timeout: Option<String>,
    /// How long a request's body may go without a byte arriving before the request fails
    /// [default: 30s].
    #[arg(long, env = "GUESTLIST_GATEWAY_BODY_TIMEOUT")]
    pub(crate) body_timeout: Option<String>,
    /// Client connections open at once; further clients wait to be accepted [default: 1024].
    #[arg(long, env = "GUESTLIST_GATEWAY_MAX_CONNECTIONS")]
    pub(crate) max_connections: Option<usize>,
    /// Keys one client (scope) may have in flight at once; past it, 429 [default: no cap].
    #[arg(long, env = "GUESTLIST_GATEWAY_MAX_IN_FLIGHT_PER_SCOPE")]
    pub(crate) max_in_flight_per_scope: Option<u64>,
    /// Keys one client (scope) may hold within --retention; past it, 429 [default: no cap].
    #[arg(long, env = "GUESTLIST_GATEWAY_MAX_KEYS_PER_SCOPE")]
    pub(crate) max_keys_per_scope: Option<u64>,
    /// A file of keys that seal stored response bodies at rest, `id:hex,id:hex` (the first
    /// seals; `openssl rand -hex 32` makes one); or the keys themselves in
    /// GUESTLIST_SEALING_KEYS [default: bodies stored as they are].
    #[arg(long, env = "GUESTLIST_GATEWAY_SEALING_KEYS_FILE")]
    pub(crate) sealing_keys_file: Option<PathBuf>,
}

/// The same settings, from the TOML file.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "kebab-case")]
struct FileSettings {
    listen: Option<String>,
    upstream: Option<String>,
    database: Option<String>,
    table: Option<String>,
    key_from: Option<String>,
    scope_from: Option<String>,
    require_key: Option<bool>,
    methods: Option<String>,
    lease: Option<String>,
    upstream_timeout: Option<String>,
    retention: Option<String>,
    max_body: Option<String>,
    mismatch_status: Option<u16>,
    metrics_listen: Option<String>,
    replay_cache: Option<String>,
    replay_cache_ttl: Option<String>,
    header_timeout: Option<String>,
    body_timeout: Option<String>,
    max_connections: Option<usize>,
    max_in_flight_per_scope: Option<u64>,
    max_keys_per_scope: Option<u64>,
    sealing_keys_file: Option<PathBuf>,
}

/// Whose key it is.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum ScopeFrom {
    /// A hash of the `Authorization` header (the layer's default).
    Authorization,
    /// The value of this header (a tenant or API-client id your edge sets).
    Header(HeaderName),
    /// One namespace for every client: a webhook endpoint with a single sender.
    None,
}

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
    pub(crate) upstream_timeout: Duration,
    pub(crate) retention: Duration,
    pub(crate) max_body: usize,
    pub(crate) mismatch_status: StatusCode,
    pub(crate) metrics_listen: Option<SocketAddr>,
    pub(crate) replay_cache: usize,
    pub(crate) replay_cache_ttl: Duration,
    pub(crate) header_timeout: Duration,
    pub(crate) body_timeout: Duration,
    pub(crate) max_connections: usize,
    pub(crate) max_in_flight_per_scope: Option<u64>,
    pub(crate) max_keys_per_scope: Option<u64>,
    pub(crate) sealing: Option<guestlist::Sealing>,
    pub(crate) key_hashing: Option<guestlist::KeyHashing>,
}

impl Settings {
    /// Flags and environment (already merged by clap) over the file over the defaults.
    pub(crate) fn resolve(args: GatewayArgs) -> anyhow::Result<Self> {
        let file = match &args.config {
            Some(path) => read_file(path)?,
            None => FileSettings::default(),
        };
        let upstream = args.upstream.or(file.upstream).context(
            "the gateway needs the service it stands in front of: --upstream http://host:port \
             (or GUESTLIST_GATEWAY_UPSTREAM, or upstream = \"…\" in the --config file)",
        )?;
        let upstream = url::Url::parse(&upstream)
            .ok()
            .filter(|url| matches!(url.scheme(), "http" | "https") && url.has_host())
            .with_context(|| {
                format!("--upstream {upstream:?} is not an http:// or https:// URL")
            })?;
        let lease = duration("lease", args.lease.or(file.lease), "30s")?;
        // The lease runs from the claim, the timeout from the send, and the answer is stored
        // after it: leave the attempt a margin to finish inside its lease.
        let margin = Duration::from_secs(1).min(lease / 2);
        let upstream_timeout = match args.upstream_timeout.or(file.upstream_timeout) {
            Some(text) => duration("upstream-timeout", Some(text), "")?,
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
        let retention = duration("retention", args.retention.or(file.retention), "24h")?;
        let replay_cache_ttl = match args.replay_cache_ttl.or(file.replay_cache_ttl) {
            Some(text) => humantime::parse_duration(&text).with_context(|| {
                format!("--replay-cache-ttl {text:?} is not a duration like 60s")
            })?,
            None => Duration::from_secs(60),
        };
        if replay_cache_ttl > retention {
            bail!(
                "--replay-cache-ttl ({}) must not exceed --retention ({}): a gateway would replay \
                 keys the database has already forgotten",
                humantime::format_duration(replay_cache_ttl),
                humantime::format_duration(retention)
            );
        }
        let header_timeout = duration(
            "header-timeout",
            args.header_timeout.or(file.header_timeout),
            "10s",
        )?;
        let body_timeout = duration(
            "body-timeout",
            args.body_timeout.or(file.body_timeout),
            "30s",
        )?;
        let max_connections = args
            .max_connections
            .or(file.max_connections)
            .unwrap_or(1024);
        anyhow::ensure!(
            max_connections > 0,
            "--max-connections must be above zero: it keeps slow clients from holding every \
             connection the gateway may open"
        );
        let mismatch = args.mismatch_status.or(file.mismatch_status).unwrap_or(422);
        let mismatch_status = StatusCode::from_u16(mismatch)
            .ok()
            .filter(StatusCode::is_client_error)
            .with_context(|| {
                format!("--mismatch-status {mismatch}: use a 4xx status, 422 or 400")
            })?;
        Ok(Self {
            listen: args
                .listen
                .or(file.listen)
                .unwrap_or_else(|| "127.0.0.1:8080".to_owned()),
            upstream,
            database: args
                .database
                .or(file.database)
                .unwrap_or_else(|| "sqlite:guestlist.db".to_owned()),
            table: args
                .table
                .or(file.table)
                .unwrap_or_else(|| "guestlist_keys".to_owned()),
            key_from: key_from(args.key_from.or(file.key_from).as_deref())?,
            scope_from: scope_from(args.scope_from.or(file.scope_from).as_deref())?,
            require_key: args.require_key.or(file.require_key).unwrap_or(false),
            methods: methods(
                args.methods
                    .or(file.methods)
                    .as_deref()
                    .unwrap_or("POST,PATCH"),
            )?,
            lease,
            upstream_timeout,
            retention,
            max_body: bytes(
                "max-body",
                args.max_body.or(file.max_body).as_deref().unwrap_or("1MiB"),
            )?,
            mismatch_status,
            replay_cache: bytes(
                "replay-cache",
                args.replay_cache
                    .or(file.replay_cache)
                    .as_deref()
                    .unwrap_or("64MiB"),
            )?,
            replay_cache_ttl,
            header_timeout,
            body_timeout,
            max_connections,
            max_in_flight_per_scope: args
                .max_in_flight_per_scope
                .or(file.max_in_flight_per_scope),
            max_keys_per_scope: args.max_keys_per_scope.or(file.max_keys_per_scope),
            sealing: sealing(args.sealing_keys_file.or(file.sealing_keys_file))?,
            key_hashing: key_hashing()?,
            metrics_listen: match args.metrics_listen.or(file.metrics_listen) {
                Some(addr) => Some(addr.parse().with_context(|| {
                    format!("--metrics-listen {addr:?} is not an address like 127.0.0.1:9090")
                })?),
                None => None,
            },
        })
    }
}

/// The sealing keys: from the file named, else from `GUESTLIST_SEALING_KEYS`, else none. The
/// keys themselves never go in the settings file, which is often not kept secret.
fn sealing(file: Option<PathBuf>) -> anyhow::Result<Option<guestlist::Sealing>> {
    let keys = match file {
        Some(path) => std::fs::read_to_string(&path)
            .with_context(|| format!("cannot read the sealing keys in {}", path.display()))?,
        None => match std::env::var("GUESTLIST_SEALING_KEYS") {
            Ok(keys) => keys,
            Err(_) => return Ok(None),
        },
    };
    Ok(Some(guestlist::Sealing::parse(&keys)?))
}

/// The secret that stores keys as keyed hashes, from `GUESTLIST_KEY_HASHING_SECRET` (never the
/// settings file), if set.
pub(crate) fn key_hashing() -> anyhow::Result<Option<guestlist::KeyHashing>> {
    match std::env::var("GUESTLIST_KEY_HASHING_SECRET") {
        Ok(secret) => Ok(Some(
            guestlist::KeyHashing::parse(&secret).context("GUESTLIST_KEY_HASHING_SECRET")?,
        )),
        Err(_) => Ok(None),
    }
}

fn read_file(path: &Path) -> anyhow::Result<FileSettings> {
    let text = std::fs::read_to_string(path)
        .with_context(|| format!("cannot read the config file {}", path.display()))?;
    toml::from_str(&text)
        .with_context(|| format!("the config file {} is not valid", path.display()))
}

fn duration(name: &str, text: Option<String>, default: &str) -> anyhow::Result<Duration> {
    let text = text.unwrap_or_else(|| default.to_owned());
    let value = humantime::parse_duration(&text)
        .with_context(|| format!("--{name} {text:?} is not a duration like 30s, 5m or 24h"))?;
    anyhow::ensure!(!value.is_zero(), "--{name} must be longer than zero");
    Ok(value)
}

fn bytes(name: &str, text: &str) -> anyhow::Result<usize> {
    let size: bytesize::ByteSize = text.parse().map_err(|err| {
        anyhow::anyhow!("--{name} {text:?} is not a size like 1MiB or 64KiB: {err}")
    })?;
    usize::try_from(size.as_u64()).with_context(|| format!("--{name} {text:?} is too large"))
}

/// `header:NAME`, `json:/pointer` or `body-sha256`.
pub(crate) fn key_from(text: Option<&str>) -> anyhow::Result<KeySource> {
    let Some(text) = text else {
        return Ok(KeySource::default());
    };
    let refused = || {
        anyhow::anyhow!(
            "--key-from {text:?}: use header:NAME (header:Idempotency-Key, \
             header:X-GitHub-Delivery), json:/pointer (json:/id) or body-sha256"
        )
    };
    if text == "body-sha256" {
        return Ok(KeySource::BodySha256);
    }
    match text.split_once(':') {
        Some(("header", name)) => Ok(KeySource::Header(
            HeaderName::try_from(name).map_err(|_| refused())?,
        )),
        Some(("json", pointer)) if pointer.starts_with('/') => {
            Ok(KeySource::JsonPointer(pointer.to_owned()))
        }
        _ => Err(refused()),
    }
}

/// `authorization`, `header:NAME` or `none`.
fn scope_from(text: Option<&str>) -> anyhow::Result<ScopeFrom> {
    match text.unwrap_or("authorization") {
        "authorization" => Ok(ScopeFrom::Authorization),
        "none" => Ok(ScopeFrom::None),
        other => match other.split_once(':') {
            Some(("header", name)) if HeaderName::try_from(name).is_ok() => {
                Ok(ScopeFrom::Header(HeaderName::try_from(name)?))
            }
            _ => bail!("--scope-from {other:?}: use authorization, header:NAME or none"),
        },
    }
}

fn methods(text: &str) -> anyhow::Result<Vec<Method>> {
    text.split(',')
        .map(|m| m.trim().to_ascii_uppercase())
        .filter(|m| !m.is_empty())
        .map(|m| {
            Method::from_bytes(m.as_bytes())
                .with_context(|| format!("--methods: {m:?} is not a method"))
        })
        .collect()
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
        assert_eq!(s.replay_cache_ttl, Duration::from_secs(60));
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

    #[test]
    fn key_sources_parse() {
        assert_eq!(
            key_from(Some("body-sha256")).unwrap(),
            KeySource::BodySha256
        );
        assert_eq!(
            key_from(Some("header:X-GitHub-Delivery")).unwrap(),
            KeySource::Header(HeaderName::from_static("x-github-delivery"))
        );
        assert!(
            key_from(Some("json:id")).is_err(),
            "a pointer starts with /"
        );
    }
}
