//! From a URL to a pool of the right kind.

use std::ops::Deref;

use anyhow::bail;
use clap::Args;
use guestlist::sqlx::{self, MySqlPool, PgPool, SqlitePool};

/// The database a command works on: `--database`, or `GUESTLIST_DATABASE_URL`; a SQLite file
/// by default. Reads as the URL.
#[derive(Debug, Args)]
pub(crate) struct DatabaseUrl {
    /// postgres://…, mysql://… (or mariadb://…), or sqlite:PATH.
    #[arg(
        id = "database",
        long = "database",
        value_name = "DATABASE",
        env = "GUESTLIST_DATABASE_URL",
        default_value = "sqlite:guestlist.db"
    )]
    url: String,
}

impl Deref for DatabaseUrl {
    type Target = str;

    fn deref(&self) -> &str {
        &self.url
    }
}

/// A pool on whichever database the URL named.
#[derive(Clone)]
pub(crate) enum AnyPool {
    Postgres(PgPool),
    Sqlite(SqlitePool),
    MySql(MySqlPool),
}

/// Runs `$body` with `$pool` bound to the concrete pool inside `$any`.
macro_rules! with_pool {
    ($any:expr, |$pool:ident| $body:expr) => {
        match $any {
            $crate::database::AnyPool::Postgres($pool) => $body,
            $crate::database::AnyPool::Sqlite($pool) => $body,
            $crate::database::AnyPool::MySql($pool) => $body,
        }
    };
}
pub(crate) use with_pool;

/// The kind of database a URL names.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Kind {
    Postgres,
    Sqlite,
    MySql,
}

impl Kind {
    pub(crate) fn of(url: &str) -> anyhow::Result<Self> {
        let scheme = url.split(':').next().unwrap_or_default();
        Ok(match scheme {
            "postgres" | "postgresql" => Kind::Postgres,
            "sqlite" => Kind::Sqlite,
            "mysql" | "mariadb" => Kind::MySql,
            _ => bail!(
                "cannot tell the database from {url:?}: use postgres://user@host/db, \
                 mysql://user@host/db (or mariadb://…) or sqlite:path/to/file.db (the gateway \
                 and the key commands also take redis://host:port)"
            ),
        })
    }

    pub(crate) fn name(self) -> &'static str {
        match self {
            Kind::Postgres => "PostgreSQL",
            Kind::Sqlite => "SQLite",
            Kind::MySql => "MySQL/MariaDB",
        }
    }
}

/// Whether `url` names a Redis server, where the gateway and the key commands can keep keys.
pub(crate) fn is_redis(url: &str) -> bool {
    matches!(
        url.split(':').next().unwrap_or_default(),
        "redis" | "rediss"
    )
}

/// Connects to the Redis at `url`, whose keys the gateway and the key commands keep.
pub(crate) async fn connect_redis(url: &str) -> anyhow::Result<guestlist::redis::RedisKeyStore> {
    use anyhow::Context;
    guestlist::redis::RedisKeyStore::connect(url)
        .await
        .with_context(|| format!("cannot connect to Redis at {}", redact(url)))
}

/// [`connect`] for a command that reads tables made before (the relay, the outbox's dead
/// letters, stats): an SQLite file that is not there is refused, not created empty.
pub(crate) async fn connect_existing(url: &str, max: u32) -> anyhow::Result<AnyPool> {
    if !is_redis(url) && Kind::of(url)? == Kind::Sqlite {
        let options = guestlist::sqlite_options(url)?;
        let path = options.get_filename();
        if path != std::path::Path::new(":memory:") && !path.exists() {
            bail!(
                "no SQLite database at {}: pass --database URL (postgres://…, mysql://… or \
                 sqlite:PATH), or create the tables first (`guestlist migrate`, and \
                 `guestlist migrate --outbox` for an outbox)",
                path.display()
            );
        }
    }
    connect(url, max).await
}

/// Connects to `url` with at most `max` connections.
pub(crate) async fn connect(url: &str, max: u32) -> anyhow::Result<AnyPool> {
    if is_redis(url) {
        bail!(
            "{} is Redis, which holds idempotency keys only (`guestlist gateway`, `keys`, \
             `stats`; its keys expire on their own): this command needs postgres://…, \
             mysql://… or sqlite:PATH",
            redact(url)
        );
    }
    let kind = Kind::of(url)?;
    let failed = |err: sqlx::Error| {
        anyhow::anyhow!(
            "cannot connect to {} at {}: {err} — check that the server runs and that the URL's \
             user, password and database are right",
            kind.name(),
            redact(url)
        )
    };
    Ok(match kind {
        Kind::Postgres => AnyPool::Postgres(
            open(url.parse().map_err(failed)?, max)
                .await
                .map_err(failed)?,
        ),
        Kind::MySql => {
            let url = url.replacen("mariadb:", "mysql:", 1);
            AnyPool::MySql(
                open(url.parse().map_err(failed)?, max)
                    .await
                    .map_err(failed)?,
            )
        }
        Kind::Sqlite => {
            let options = guestlist::sqlite_options(url).map_err(failed)?;
            AnyPool::Sqlite(open(options, max).await.map_err(failed)?)
        }
    })
}

async fn open<DB: sqlx::Database>(
    options: <DB::Connection as sqlx::Connection>::Options,
    max: u32,
) -> Result<sqlx::Pool<DB>, sqlx::Error> {
    use sqlx::Connection;
    // One plain attempt first: a pool retries a refused connection until its timeout, and a
    // command-line user should hear at once that the server is not there.
    DB::Connection::connect_with(&options)
        .await?
        .close()
        .await?;
    Ok(sqlx::pool::PoolOptions::new()
        .max_connections(max)
        .connect_lazy_with(options))
}

/// The URL with its password masked, for messages.
pub(crate) fn redact(raw: &str) -> String {
    match url::Url::parse(raw) {
        Ok(mut parsed) if parsed.password().is_some() => {
            let _ = parsed.set_password(Some("***"));
            parsed.to_string()
        }
        _ => raw.to_owned(),
    }
}
