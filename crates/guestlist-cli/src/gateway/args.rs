//! The gateway's settings as they are given, each declared once: a flag, its environment
//! variable, a key of the TOML file, and a default; layered in that order.

use std::path::{Path, PathBuf};

use anyhow::{Context, bail};
use clap::Args;
use serde::{Deserialize, Serialize};

/// `guestlist gateway`'s settings, each declared once: a flag, its environment variable, and by
/// its name a key of the TOML file given with `--config`; its default is in [`DEFAULTS`].
#[derive(Debug, Args, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "kebab-case")]
pub(crate) struct GatewayArgs {
    /// A TOML file of settings named like the flags (listen = "127.0.0.1:8080"); flags and
    /// environment variables win over it.
    #[arg(long, env = "GUESTLIST_GATEWAY_CONFIG")]
    #[serde(skip)]
    pub(crate) config: Option<PathBuf>,
    /// Where the gateway listens.
    #[arg(long, env = "GUESTLIST_GATEWAY_LISTEN")]
    pub(crate) listen: Option<String>,
    /// The service behind the gateway, e.g. http://127.0.0.1:3000.
    #[arg(long, env = "GUESTLIST_GATEWAY_UPSTREAM")]
    pub(crate) upstream: Option<String>,
    /// postgres://…, mysql://… (or mariadb://…), sqlite:PATH or redis://host:port.
    #[arg(long, env = "GUESTLIST_DATABASE_URL")]
    pub(crate) database: Option<String>,
    /// The key table; on Redis, the prefix of its keys.
    #[arg(long, env = "GUESTLIST_GATEWAY_TABLE")]
    pub(crate) table: Option<String>,
    /// Where the key is: header:NAME, json:/pointer (a field of the raw body) or body-sha256.
    #[arg(long, env = "GUESTLIST_GATEWAY_KEY_FROM")]
    pub(crate) key_from: Option<String>,
    /// Whose key it is: authorization (a hash of the Authorization header), header:NAME (its
    /// value), or none (one namespace for every client).
    #[arg(long, env = "GUESTLIST_GATEWAY_SCOPE_FROM")]
    pub(crate) scope_from: Option<String>,
    /// Refuse keyed methods without a key (400) instead of passing them through.
    #[arg(long, env = "GUESTLIST_GATEWAY_REQUIRE_KEY", num_args = 0..=1, default_missing_value = "true")]
    pub(crate) require_key: Option<bool>,
    /// The methods whose requests are keyed.
    #[arg(long, env = "GUESTLIST_GATEWAY_METHODS")]
    pub(crate) methods: Option<String>,
    /// How long a request holds its key before a retry may take over.
    #[arg(long, env = "GUESTLIST_GATEWAY_LEASE")]
    pub(crate) lease: Option<String>,
    /// How long a request whose key is in flight waits for the first attempt's answer (then
    /// replayed to it) before it gets 409; a client asks for less with `Prefer: wait=N`. 0s
    /// answers 409 at once.
    #[arg(long, env = "GUESTLIST_GATEWAY_IN_FLIGHT_WAIT")]
    pub(crate) in_flight_wait: Option<String>,
    /// How long the upstream may take to answer a keyed request; must end 1 s (or half the
    /// lease, if less) before the lease; the lease minus 5 s unless set (half the lease under
    /// 10 s). Unkeyed requests are not limited.
    #[arg(long, env = "GUESTLIST_GATEWAY_UPSTREAM_TIMEOUT")]
    pub(crate) upstream_timeout: Option<String>,
    /// How long keys and their responses are kept.
    #[arg(long, env = "GUESTLIST_GATEWAY_RETENTION")]
    pub(crate) retention: Option<String>,
    /// The largest request body on a keyed request, and the largest response stored for replay.
    #[arg(long, env = "GUESTLIST_GATEWAY_MAX_BODY")]
    pub(crate) max_body: Option<String>,
    /// The status for a key reused with another request: 422, or 400 as Stripe answers.
    #[arg(long, env = "GUESTLIST_GATEWAY_MISMATCH_STATUS")]
    pub(crate) mismatch_status: Option<u16>,
    /// Where /metrics (Prometheus text) and /healthz listen; off unless set.
    #[arg(long, env = "GUESTLIST_GATEWAY_METRICS_LISTEN")]
    pub(crate) metrics_listen: Option<String>,
    /// Memory for stored responses (stored by this gateway, or replayed by it once), so that
    /// their retries skip the database; 0 turns it off.
    #[arg(long, env = "GUESTLIST_GATEWAY_REPLAY_CACHE")]
    pub(crate) replay_cache: Option<String>,
    /// The most responses that memory holds (each weighs at least --replay-cache divided by
    /// this); 0 turns it off.
    #[arg(long, env = "GUESTLIST_GATEWAY_REPLAY_CACHE_ENTRIES")]
    pub(crate) replay_cache_entries: Option<u64>,
    /// How long a response stays in that memory: a key evicted by an operator may still be
    /// replayed by a gateway for this long.
    #[arg(long, env = "GUESTLIST_GATEWAY_REPLAY_CACHE_TTL")]
    pub(crate) replay_cache_ttl: Option<String>,
    /// How long a client may take to send a request's headers before its connection is closed.
    #[arg(long, env = "GUESTLIST_GATEWAY_HEADER_TIMEOUT")]
    pub(crate) header_timeout: Option<String>,
    /// How long a request's body may go without a byte arriving before the request fails.
    #[arg(long, env = "GUESTLIST_GATEWAY_BODY_TIMEOUT")]
    pub(crate) body_timeout: Option<String>,
    /// Client connections open at once; further clients wait to be accepted.
    #[arg(long, env = "GUESTLIST_GATEWAY_MAX_CONNECTIONS")]
    pub(crate) max_connections: Option<usize>,
    /// Keys one client (scope) may have in flight at once; past it, 429. No cap unless set.
    #[arg(long, env = "GUESTLIST_GATEWAY_MAX_IN_FLIGHT_PER_SCOPE")]
    pub(crate) max_in_flight_per_scope: Option<u64>,
    /// Keys one client (scope) may hold within --retention; past it, 429. No cap unless set.
    #[arg(long, env = "GUESTLIST_GATEWAY_MAX_KEYS_PER_SCOPE")]
    pub(crate) max_keys_per_scope: Option<u64>,
    /// A file of keys that seal stored response bodies at rest, `id:hex,id:hex` (the first
    /// seals; `openssl rand -hex 32` makes one); or the keys themselves in
    /// GUESTLIST_SEALING_KEYS. Bodies are stored as they are unless set.
    #[arg(long, env = "GUESTLIST_GATEWAY_SEALING_KEYS_FILE")]
    pub(crate) sealing_keys_file: Option<PathBuf>,
}

/// The defaults, in the file's form: what a setting is when no flag, variable or file sets it.
/// The help text shows them (see [`annotate`]). `upstream` has none; `upstream-timeout`'s
/// follows the lease (the lease minus 5 s; half the lease under 10 s); the caps, the metrics
/// address and the sealing keys are off unless set.
pub(crate) const DEFAULTS: &str = r#"
listen = "127.0.0.1:8080"
database = "sqlite:guestlist.db"
table = "guestlist_keys"
key-from = "header:Idempotency-Key"
scope-from = "authorization"
require-key = false
methods = "POST,PATCH"
lease = "30s"
in-flight-wait = "0s"
retention = "24h"
max-body = "1MiB"
mismatch-status = 422
replay-cache = "64MiB"
replay-cache-entries = 100000
replay-cache-ttl = "60s"
header-timeout = "10s"
body-timeout = "30s"
max-connections = 1024
"#;

impl GatewayArgs {
    /// These settings over the file's over the defaults, each taken from the first layer that
    /// sets it.
    pub(crate) fn layered(self) -> anyhow::Result<Self> {
        let file = match &self.config {
            Some(path) => read_file(path)?,
            None => Self::default(),
        };
        let defaults: Self = toml::from_str(DEFAULTS).context("the gateway's own defaults")?;
        let mut merged = serde_json::Map::new();
        for layer in [&self, &file, &defaults] {
            let serde_json::Value::Object(fields) = serde_json::to_value(layer)? else {
                bail!("the gateway's settings are not a table");
            };
            for (name, value) in fields.into_iter().filter(|(_, v)| !v.is_null()) {
                merged.entry(name).or_insert(value);
            }
        }
        Ok(Self {
            config: self.config,
            ..serde_json::from_value(serde_json::Value::Object(merged))?
        })
    }
}

/// `guestlist gateway`'s command with each flag's help ending in its default from [`DEFAULTS`].
pub(crate) fn annotate(command: clap::Command) -> clap::Command {
    let defaults: toml::Table = toml::from_str(DEFAULTS).expect("the defaults are TOML");
    defaults.iter().fold(command, |command, (name, value)| {
        let shown = match value {
            toml::Value::String(text) => text.clone(),
            toml::Value::Integer(n) => n.to_string(),
            toml::Value::Boolean(b) => b.to_string(),
            other => format!("{other:?}"),
        };
        command.mut_arg(name.replace('-', "_"), |arg| {
            let help = arg.get_help().map(ToString::to_string).unwrap_or_default();
            arg.help(format!("{help} [default: {shown}]"))
        })
    })
}

fn read_file(path: &Path) -> anyhow::Result<GatewayArgs> {
    let text = std::fs::read_to_string(path)
        .with_context(|| format!("cannot read the config file {}", path.display()))?;
    toml::from_str(&text)
        .with_context(|| format!("the config file {} is not valid", path.display()))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Each default is written once, in DEFAULTS, and the help shows it beside its flag.
    #[test]
    fn the_help_shows_each_default() {
        use clap::Args as _;
        let mut command = annotate(GatewayArgs::augment_args(clap::Command::new("gateway")));
        let help = command.render_help().to_string();
        for shown in [
            "[default: 127.0.0.1:8080]",
            "[default: 30s]",
            "[default: 422]",
            "[default: false]",
        ] {
            assert!(help.contains(shown), "{shown} in {help}");
        }
        assert!(
            !help.contains("[default: the"),
            "no default written by hand: {help}"
        );
    }
}
