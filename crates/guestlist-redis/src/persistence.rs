//! What the guarantee rests on when keys live in Redis: that Redis keeps them. A key Redis
//! forgets (a restart without the append-only file, an eviction under memory pressure) lets its
//! retry run the request again.

use std::collections::HashMap;

use crate::{Error, RedisKeyStore};

/// The server settings that decide whether Redis keeps a key once it said it stored it, as read
/// with `CONFIG GET` (`None` where the server would not say: some hosted services rename or
/// forbid `CONFIG`).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Persistence {
    /// `appendonly`: `yes` writes every change to the append-only file.
    pub appendonly: Option<String>,
    /// `appendfsync`: `always` loses nothing on a crash, `everysec` up to a second, `no` what
    /// the operating system had not yet written.
    pub appendfsync: Option<String>,
    /// `maxmemory-policy`: anything but `noeviction` lets Redis drop keys when memory is full.
    pub maxmemory_policy: Option<String>,
}

impl Persistence {
    /// What in these settings can make Redis forget a key, each with what to set instead;
    /// empty when nothing can.
    pub fn risks(&self) -> Vec<String> {
        let mut risks = Vec::new();
        let (Some(appendonly), Some(policy)) = (&self.appendonly, &self.maxmemory_policy) else {
            risks.push(
                "cannot read the server's persistence settings (CONFIG GET is refused): make \
                 sure it runs with appendonly yes and maxmemory-policy noeviction"
                    .to_owned(),
            );
            return risks;
        };
        if appendonly != "yes" {
            risks.push(
                "appendonly is no: a restart of Redis forgets the keys written since its last \
                 snapshot, and their retries run again; set appendonly yes (appendfsync \
                 everysec loses at most a second of keys on a crash, always loses none)"
                    .to_owned(),
            );
        } else if self.appendfsync.as_deref() == Some("no") {
            risks.push(
                "appendfsync is no: a crash of the machine forgets the keys the operating \
                 system had not yet written; set appendfsync everysec or always"
                    .to_owned(),
            );
        }
        if policy != "noeviction" {
            risks.push(format!(
                "maxmemory-policy is {policy}: when memory is full Redis drops keys, and their \
                 retries run again; set maxmemory-policy noeviction (a full Redis then refuses \
                 new claims with an error, which clients retry, and forgets nothing)"
            ));
        }
        risks
    }
}

impl RedisKeyStore {
    /// Reads the server's persistence settings (see [`Persistence::risks`]).
    pub async fn persistence(&self) -> Result<Persistence, Error> {
        let mut conn = self.conn.clone();
        let mut read = async |name: &str| -> Result<Option<String>, Error> {
            let answer: Result<HashMap<String, String>, _> = redis::cmd("CONFIG")
                .arg("GET")
                .arg(name)
                .query_async(&mut conn)
                .await;
            match answer {
                Ok(mut values) => Ok(values.remove(name)),
                // Refused (renamed or forbidden): the caller says it cannot tell.
                Err(err) if !err.is_io_error() => Ok(None),
                Err(err) => Err(err.into()),
            }
        };
        Ok(Persistence {
            appendonly: read("appendonly").await?,
            appendfsync: read("appendfsync").await?,
            maxmemory_policy: read("maxmemory-policy").await?,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::Persistence;

    fn settings(appendonly: &str, fsync: &str, policy: &str) -> Persistence {
        Persistence {
            appendonly: Some(appendonly.into()),
            appendfsync: Some(fsync.into()),
            maxmemory_policy: Some(policy.into()),
        }
    }

    #[test]
    fn only_a_server_that_keeps_every_key_has_no_risk() {
        assert!(settings("yes", "everysec", "noeviction").risks().is_empty());
        assert!(settings("no", "everysec", "noeviction").risks()[0].contains("appendonly yes"));
        assert!(settings("yes", "no", "noeviction").risks()[0].contains("appendfsync"));
        let evicting = settings("yes", "always", "volatile-lru").risks();
        assert!(evicting[0].contains("volatile-lru") && evicting[0].contains("noeviction"));
        assert_eq!(Persistence::default().risks().len(), 1);
    }
}
