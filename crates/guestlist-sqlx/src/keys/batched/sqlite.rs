//! SQLite's round: every claim and stored response in one transaction, from the store's one
//! writer task. The statements cost no round trip (the database is in the process); the commit
//! is what a round shares.

use std::collections::HashSet;

use sqlx::Sqlite;

use super::{ClaimItem, CompleteItem, sealed::WriteRound};
use crate::SqlKeyStore;
use crate::backend::sealed::{KeyStatements, KeyValues, Statements};

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
            let inserted = Sqlite::key_insert(
                &mut tx,
                &store.sql,
                &c.scope,
                &c.key,
                &c.fingerprint,
                c.token,
                c.lease_ms,
            )
            .await?;
            if inserted {
                written.insert(c.token);
            }
        }
        for c in completes {
            let values = KeyValues::Complete(
                c.status,
                &c.headers,
                c.body.as_deref(),
                &c.scope,
                &c.key,
                c.token,
            );
            if Sqlite::key_update(&mut tx, &store.sql.complete, values).await? == 1 {
                written.insert(c.token);
            }
        }
        tx.commit().await?;
        Ok(written)
    }
}
