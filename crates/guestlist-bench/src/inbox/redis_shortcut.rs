//! The shortcut the inbox replaces, as a consumer uses it: one `SET key 1 NX EX <retention>`
//! per message in Redis before the work, a connection per worker. No transaction ties the mark
//! to the work (a crash between them loses the message or runs it twice) and, as Redis runs by
//! default, nothing waits for a disk.

use std::time::Duration;

use anyhow::Context;
use redis::aio::MultiplexedConnection;

/// How long a mark lives: the inbox's default retention.
const RETENTION: Duration = Duration::from_secs(7 * 24 * 3600);

/// One connection per worker, and the prefix of this run's keys.
pub(super) struct RedisShortcut {
    connections: Vec<MultiplexedConnection>,
    prefix: String,
}

impl RedisShortcut {
    /// Opens `workers` connections to the Redis at `url`.
    pub(super) async fn connect(url: &str, workers: usize) -> anyhow::Result<Self> {
        let client = redis::Client::open(url)
            .with_context(|| format!("{url} is not a Redis URL (redis://HOST:PORT)"))?;
        let mut connections = Vec::with_capacity(workers);
        for _ in 0..workers {
            let connection = client
                .get_multiplexed_async_connection()
                .await
                .with_context(|| {
                    format!("cannot connect to Redis at {url}; is it running? (--redis URL)")
                })?;
            connections.push(connection);
        }
        Ok(Self {
            connections,
            prefix: format!("guestlist-bench:{}:", std::process::id()),
        })
    }

    /// Marks message `id` seen for `handler` on worker `worker`'s connection: `true` when it
    /// was new.
    pub(super) async fn mark(
        &self,
        worker: usize,
        handler: &str,
        id: &str,
    ) -> anyhow::Result<bool> {
        let mut connection = self.connections[worker].clone();
        let set: Option<String> = redis::cmd("SET")
            .arg(format!("{}{handler}:{id}", self.prefix))
            .arg(1)
            .arg("NX")
            .arg("EX")
            .arg(RETENTION.as_secs())
            .query_async(&mut connection)
            .await?;
        Ok(set.is_some())
    }

    /// Deletes this run's keys, so that each figure starts from the same Redis.
    pub(super) async fn reset(&self) -> anyhow::Result<()> {
        let mut connection = self.connections[0].clone();
        let pattern = format!("{}*", self.prefix);
        let mut cursor = 0u64;
        loop {
            let (next, keys): (u64, Vec<String>) = redis::cmd("SCAN")
                .arg(cursor)
                .arg("MATCH")
                .arg(&pattern)
                .arg("COUNT")
                .arg(10_000)
                .query_async(&mut connection)
                .await?;
            if !keys.is_empty() {
                let _: i64 = redis::cmd("UNLINK")
                    .arg(&keys)
                    .query_async(&mut connection)
                    .await?;
            }
            if next == 0 {
                return Ok(());
            }
            cursor = next;
        }
    }
}
