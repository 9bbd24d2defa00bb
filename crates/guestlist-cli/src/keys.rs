//! The operator's commands on idempotency keys: `guestlist keys inspect`, `guestlist keys
//! evict`, and the key table's part of `guestlist stats`.

use anyhow::Context as _;
use clap::{Args, Subcommand};
use guestlist::redis::RedisKeyStore;
use guestlist::{
    Backend, IdempotencyKey, SqlKeyStore,
    keys::{KeyRecord, KeyState, Scope},
};

use crate::database::{self, with_pool};
use crate::figures;

/// Where the keys are.
#[derive(Debug, Args)]
pub(crate) struct KeyTableArgs {
    /// postgres://…, mysql://… (or mariadb://…), sqlite:PATH or redis://host:port.
    #[arg(
        long,
        env = "GUESTLIST_DATABASE_URL",
        default_value = "sqlite:guestlist.db"
    )]
    pub(crate) database: String,
    /// The key table; on Redis, the prefix of its keys.
    #[arg(long, default_value = "guestlist_keys")]
    pub(crate) table: String,
}

/// Which key.
#[derive(Debug, Args)]
#[group(required = true, multiple = false, id = "whose")]
pub(crate) struct Whose {
    /// The scope as stored: a --scope-from header's value, `all` under --scope-from none, or
    /// `cred:<sha256>` for Authorization.
    #[arg(long, group = "whose")]
    scope: Option<String>,
    /// The client's Authorization header, hashed to its scope as the gateway does.
    #[arg(long, group = "whose")]
    authorization: Option<String>,
}

#[derive(Debug, Args)]
pub(crate) struct KeyArgs {
    #[command(flatten)]
    table: KeyTableArgs,
    #[command(flatten)]
    whose: Whose,
    /// The idempotency key.
    #[arg(long)]
    key: String,
    /// (evict) Remove the key even while its request runs: a retry may then run it a second
    /// time, and the running one's answer is not stored.
    #[arg(long)]
    force: bool,
}

#[derive(Debug, Subcommand)]
pub(crate) enum KeysCommand {
    /// Show one key: in flight, abandoned, or stored (with its status).
    Inspect(KeyArgs),
    /// Remove one key whatever its state, so that the next request with it runs again.
    Evict(KeyArgs),
    /// List the keys no response is stored for yet, newest first: in flight with the lease
    /// left, or abandoned by an attempt that died (SQL tables; not Redis).
    Held(HeldArgs),
}

#[derive(Debug, Args)]
pub(crate) struct HeldArgs {
    #[command(flatten)]
    table: KeyTableArgs,
    /// How many at most.
    #[arg(long, default_value_t = 50)]
    limit: u32,
}

impl KeyArgs {
    fn scope(&self) -> anyhow::Result<Scope> {
        match (&self.whose.scope, &self.whose.authorization) {
            (Some(scope), _) => Ok(Scope::new(scope.clone())?),
            // The gateway's own derivation, so that `bearer a` finds what `Bearer a` stored.
            (None, Some(credentials)) => {
                guestlist::http::scope_of_credentials(credentials.as_bytes())
                    .context("--authorization is blank: no client sends blank credentials")
            }
            (None, None) => anyhow::bail!("say whose key: --scope S or --authorization VALUE"),
        }
    }
}

pub(crate) async fn run(command: KeysCommand) -> anyhow::Result<()> {
    let (args, evict) = match command {
        KeysCommand::Inspect(args) => (args, false),
        KeysCommand::Evict(args) => (args, true),
        KeysCommand::Held(args) => return list_held(args).await,
    };
    let (scope, key) = (args.scope()?, IdempotencyKey::new(args.key.clone())?);
    let (table, force) = (args.table.table.as_str(), args.force);
    if database::is_redis(&args.table.database) {
        let keys = redis_keys(&args.table).await?;
        return one_key(&keys, table, &scope, &key, evict, force).await;
    }
    let pool = database::connect_existing(&args.table.database, 1).await?;
    with_pool!(pool, |pool| {
        let keys = sql_keys(pool, table)?;
        one_key(&keys, table, &scope, &key, evict, force).await
    })
}

/// Prints the keys without a response, newest first.
async fn list_held(args: HeldArgs) -> anyhow::Result<()> {
    anyhow::ensure!(
        !database::is_redis(&args.table.database),
        "Redis cannot list its keys without scanning them all: look one up with `guestlist keys \
         inspect`, or count them with `guestlist stats`"
    );
    let pool = database::connect_existing(&args.table.database, 1).await?;
    let held = with_pool!(pool, |pool| {
        sql_keys(pool, &args.table.table)?
            .in_flight(args.limit)
            .await?
    });
    if held.is_empty() {
        println!("no key in flight (table {})", args.table.table);
    }
    for key in held {
        println!(
            "key {} in scope {}: {}; attempt {}; claimed {} ago",
            key.key,
            key.scope,
            key.state,
            key.attempt,
            figures::age(Some(key.age))
        );
    }
    Ok(())
}

/// The key table `table` as the gateway keeps it: keys stored as keyed hashes
/// (GUESTLIST_KEY_HASHING_SECRET) are looked up by the raw key, hashed the gateway's way.
pub(crate) fn sql_keys<DB: Backend>(
    pool: guestlist::sqlx::Pool<DB>,
    table: &str,
) -> anyhow::Result<SqlKeyStore<DB>> {
    let mut keys = SqlKeyStore::with_table(pool, table)?;
    if let Some(hashing) = crate::secrets::key_hashing()? {
        keys = keys.hashing_keys(hashing);
    }
    Ok(keys)
}

/// The Redis keys under the prefix `--table` names.
async fn redis_keys(args: &KeyTableArgs) -> anyhow::Result<RedisKeyStore> {
    anyhow::ensure!(
        crate::secrets::key_hashing()?.is_none(),
        "GUESTLIST_KEY_HASHING_SECRET is set, but Redis stores keys as they are: unset it"
    );
    let keys = database::connect_redis(&args.database).await?;
    Ok(keys.prefix(args.table.clone()))
}

/// What the operator's commands ask of a key store.
trait OperatorKeys {
    async fn inspect(
        &self,
        scope: &Scope,
        key: &IdempotencyKey,
    ) -> anyhow::Result<Option<KeyRecord>>;
    async fn evict(&self, scope: &Scope, key: &IdempotencyKey) -> anyhow::Result<bool>;
}

impl<DB: Backend> OperatorKeys for SqlKeyStore<DB> {
    async fn inspect(
        &self,
        scope: &Scope,
        key: &IdempotencyKey,
    ) -> anyhow::Result<Option<KeyRecord>> {
        Ok(SqlKeyStore::inspect(self, scope, key).await?)
    }
    async fn evict(&self, scope: &Scope, key: &IdempotencyKey) -> anyhow::Result<bool> {
        Ok(SqlKeyStore::evict(self, scope, key).await?)
    }
}

impl OperatorKeys for RedisKeyStore {
    async fn inspect(
        &self,
        scope: &Scope,
        key: &IdempotencyKey,
    ) -> anyhow::Result<Option<KeyRecord>> {
        Ok(RedisKeyStore::inspect(self, scope, key).await?)
    }
    async fn evict(&self, scope: &Scope, key: &IdempotencyKey) -> anyhow::Result<bool> {
        Ok(RedisKeyStore::evict(self, scope, key).await?)
    }
}

async fn one_key(
    keys: &impl OperatorKeys,
    table: &str,
    scope: &Scope,
    key: &IdempotencyKey,
    evict: bool,
    force: bool,
) -> anyhow::Result<()> {
    let Some(record) = keys.inspect(scope, key).await? else {
        if evict {
            println!("no key {key} in scope {scope} (table {table}): nothing removed");
            return Ok(());
        }
        anyhow::bail!(
            "no key {key} in scope {scope} (table {table}): never used, evicted, or purged"
        );
    };
    let describe = format!(
        "key {key} in scope {scope}: {}; attempt {}; request fingerprint {}",
        record.state, record.attempt, record.fingerprint
    );
    if !evict {
        println!("{describe}");
        return Ok(());
    }
    if let Some(lease_left) = held(&record, force) {
        anyhow::bail!(
            "key {key} in scope {scope} is in flight (its lease ends in {:.0}s): evicting it now \
             lets a retry run the request again while the first may still be running, and the \
             first one's answer would not be stored. Wait for the lease, or pass --force",
            lease_left.as_secs_f64().ceil()
        );
    }
    if keys.evict(scope, key).await? {
        println!(
            "removed {describe}\nthe next request with this key runs again (a gateway that \
             stored or replayed it lately may still answer from memory until its --replay-cache-ttl ends)"
        );
    } else {
        println!(
            "no key {key} in scope {scope}: it went (purged or evicted) before this could remove it"
        );
    }
    Ok(())
}

/// The lease left on a key in flight, which an eviction waits for unless forced: evicting it
/// lets a retry run the request again while the first may still be running.
pub(crate) fn held(record: &KeyRecord, force: bool) -> Option<std::time::Duration> {
    match record.state {
        KeyState::InFlight { lease_left } if !force => Some(lease_left),
        _ => None,
    }
}

/// Prints the key table's figures (`guestlist stats`).
pub(crate) async fn print_stats(table: &KeyTableArgs) -> anyhow::Result<()> {
    let stats = if database::is_redis(&table.database) {
        redis_keys(table).await?.stats().await?
    } else {
        let pool = database::connect_existing(&table.database, 1).await?;
        with_pool!(pool, |pool| SqlKeyStore::with_table(pool, &table.table)?
            .stats()
            .await)?
    };
    let redis = database::is_redis(&table.database);
    println!(
        "{}      {}",
        if redis { "keys " } else { "table" },
        table.table
    );
    println!("rows       {}", stats.rows);
    println!("in flight  {}", stats.in_flight);
    println!("oldest     {}", figures::age(stats.oldest));
    println!("size       {}", figures::size(stats.bytes, &table.database));
    Ok(())
}
