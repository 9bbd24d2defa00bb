//! SQLite's round: every claim and stored response in one transaction, from the store's one
//! writer task. The statements cost no round trip (the database is in the process); the commit
//! is what a round shares.

use std::collections::HashSet;

use sqlx::{Pool, Sqlite};

use crate::backend::keys::{Complete, Insert, WriteRound};
use crate::backend::sealed::{KeyStatements, Statements};
use crate::backend::{Codec, KeysSql};

impl WriteRound for Sqlite {
    async fn write_round(
        pool: &Pool<Self>,
        sql: &KeysSql,
        claims: &[Insert<'_>],
        completes: &[Complete<'_>],
    ) -> Result<HashSet<i64>, sqlx::Error> {
        // BEGIN IMMEDIATE: the write lock up front, so the round never fails half-way for it.
        let mut tx = <Sqlite as Statements>::begin(pool).await?;
        let mut written = HashSet::with_capacity(claims.len() + completes.len());
        for claim in claims {
            if Sqlite::key_insert(&mut tx, sql, *claim).await? {
                written.insert(claim.token);
            }
        }
        for complete in completes {
            if Sqlite::run(&mut tx, sql, *complete).await? == 1 {
                written.insert(complete.token);
            }
        }
        tx.commit().await?;
        Ok(written)
    }
}
