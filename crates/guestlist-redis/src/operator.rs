//! What an operator asks of the Redis store: one key's state, its eviction, and the figures of
//! every key under the store's prefix.

use std::time::Duration;

use guestlist_core::{IdempotencyKey, KeyRecord, KeyState, KeyStats, Scope};

use crate::{Error, RedisKeyStore};

/// A key's `status` (none while in flight) and `created_at` (milliseconds, Redis's clock).
type StatusAndBirth = (Option<String>, Option<i64>);

/// Keys read per `SCAN` step of [`RedisKeyStore::stats`].
const SCAN_COUNT: usize = 1_000;

impl RedisKeyStore {
    /// Asks Redis whether it answers (`PING`), for health checks.
    pub async fn ping(&self) -> Result<(), Error> {
        let _: String = redis::cmd("PING")
            .query_async(&mut self.conn.clone())
            .await?;
        Ok(())
    }

    /// Reads one key for an operator: who holds it, and whether a response is stored. `None`
    /// when the key is unknown (never used, evicted, or expired).
    pub async fn inspect(
        &self,
        scope: &Scope,
        key: &IdempotencyKey,
    ) -> Result<Option<KeyRecord>, Error> {
        type Fields = (
            Option<String>,
            Option<u16>,
            Option<Vec<u8>>,
            Option<String>,
            Option<i64>,
            Option<u64>,
        );
        let ((fingerprint, status, body, omitted, locked_until, attempt), (secs, micros)): (
            Fields,
            (i64, i64),
        ) = redis::pipe()
            .cmd("HMGET")
            .arg(self.redis_key(scope, key))
            .arg(&[
                "fingerprint",
                "status",
                "body",
                "omitted",
                "locked_until",
                "attempt",
            ])
            .cmd("TIME")
            .query_async(&mut self.conn.clone())
            .await?;
        let Some(fingerprint) = fingerprint else {
            return Ok(None);
        };
        let now_ms = secs * 1000 + micros / 1000;
        let state = match (status, locked_until) {
            (Some(status), _) => KeyState::Stored {
                status,
                body_bytes: match omitted.as_deref() {
                    Some("1") => None,
                    _ => Some(body.map_or(0, |body| body.len())),
                },
            },
            (None, Some(until)) if until > now_ms => KeyState::InFlight {
                lease_left: Duration::from_millis((until - now_ms) as u64),
            },
            (None, _) => KeyState::Abandoned,
        };
        Ok(Some(KeyRecord {
            attempt: attempt.unwrap_or(1),
            fingerprint,
            state,
        }))
    }

    /// Deletes the key whatever its state (an operator's eviction). `true` when a key went.
    pub async fn evict(&self, scope: &Scope, key: &IdempotencyKey) -> Result<bool, Error> {
        let gone: i64 = redis::cmd("DEL")
            .arg(self.redis_key(scope, key))
            .query_async(&mut self.conn.clone())
            .await?;
        Ok(gone == 1)
    }

    /// The figures of every key under the store's prefix: how many, how many in flight, the
    /// oldest one's age, and the memory they take. It walks the keys with `SCAN` (a step of a
    /// thousand at a time, so Redis keeps serving between steps): an operator's command, not
    /// one to poll.
    pub async fn stats(&self) -> Result<KeyStats, Error> {
        let mut conn = self.conn.clone();
        let pattern = format!("{}:*", glob_escaped(&self.prefix));
        let (secs, micros): (i64, i64) = redis::cmd("TIME").query_async(&mut conn).await?;
        let now_ms = secs * 1000 + micros / 1000;
        let mut stats = KeyStats {
            rows: 0,
            in_flight: 0,
            oldest: None,
            bytes: Some(0),
        };
        let mut cursor = 0u64;
        loop {
            let (next, names): (u64, Vec<String>) = redis::cmd("SCAN")
                .arg(cursor)
                .arg("MATCH")
                .arg(&pattern)
                .arg("COUNT")
                .arg(SCAN_COUNT)
                .query_async(&mut conn)
                .await?;
            let mut pipe = redis::pipe();
            for name in &names {
                pipe.cmd("HMGET").arg(name).arg(&["status", "created_at"]);
                pipe.cmd("MEMORY").arg("USAGE").arg(name);
            }
            let answers: Vec<(StatusAndBirth, Option<u64>)> = pipe.query_async(&mut conn).await?;
            for ((status, created_at), bytes) in answers {
                // A key that expired between the scan and the read is no longer there.
                let Some(bytes) = bytes else { continue };
                stats.rows += 1;
                stats.in_flight += u64::from(status.is_none());
                stats.bytes = stats.bytes.map(|total| total + bytes);
                if let Some(age) = created_at.map(|at| (now_ms - at).max(0) as u64) {
                    let age = Duration::from_millis(age);
                    stats.oldest = Some(stats.oldest.map_or(age, |oldest| oldest.max(age)));
                }
            }
            if next == 0 {
                return Ok(stats);
            }
            cursor = next;
        }
    }
}

/// `text` with the characters `SCAN MATCH` reads as a pattern escaped.
fn glob_escaped(text: &str) -> String {
    let mut escaped = String::with_capacity(text.len());
    for c in text.chars() {
        if matches!(c, '*' | '?' | '[' | ']' | '\\') {
            escaped.push('\\');
        }
        escaped.push(c);
    }
    escaped
}

#[cfg(test)]
mod tests {
    use super::glob_escaped;

    #[test]
    fn a_prefix_matches_only_itself() {
        assert_eq!(glob_escaped("gw_a"), "gw_a");
        assert_eq!(glob_escaped("a*b?[c]\\"), "a\\*b\\?\\[c\\]\\\\");
    }
}
