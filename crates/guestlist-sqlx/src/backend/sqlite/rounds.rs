//! SQLite's round: every claim and stored response in one transaction, from the store's one
//! writer task. The statements cost no round trip (the database is in the process); the commit
//! is what a round shares.

use std::collections::HashSet;

use sqlx::Sqlite;

use super::{ClaimItem, CompleteItem, sealed::WriteRound};
use crate::SqlKeyStore;
use crate::backend::Codec;
use crate::backend::keys::{Complete, Insert, Key};
use crate::backend::sealed::{KeyStatements, Statements};

impl WriteRound for Sqlite {
    async fn write_round(
        store: &SqlKeyStore<Self>,
        claims: &[ClaimItem],
        completes: &[CompleteItem],
    ) -> Result<HashSet<i64>, sqlx::Error> {
        // BEGIN IMMEDIATE: the write lock up front, so the round never fails half-way for it.
        let mut tx = <Sqlite as Statements>::begin(store.pool()).await?;
        let mut written = HashSet::with_capacity(claims.len() + completes.len());
        for c in claims {
            let insert = Insert {
                key: Key {
                    scope: &c.scope,
                    key: &c.key,
                },
                fingerprint: &c.fingerprint,
                token: c.token,
                lease_ms: c.lease_ms,
            };
            let inserted = Sqlite::key_insert(&mut tx, &store.sql, insert).await?;
            if inserted {
                written.insert(c.token);
            }
        }
        for c in completes {
            let complete = Complete {
                status: c.status,
                headers: &c.headers,
                body: c.body.as_deref(),
                key: Key {
                    scope: &c.scope,
                    key: &c.key,
                },
                token: c.token,
            };
            if Sqlite::run(&mut tx, &*store.sql, complete).await? == 1 {
                written.insert(c.token);
            }
        }
        tx.commit().await?;
        Ok(written)
    }
}
