//! The three-step message written by hand with sqlx on PostgreSQL: the statements guestlist
//! sends, without guestlist around them (the inbox read that answers a redelivery, a run row
//! with a lease and a fencing token, the journal read with a second look at the inbox, an
//! external step's journal row and the guard in one statement, a database step's journal row on
//! its own transaction, the final commit with the inbox's claim).

use guestlist::sqlx::{self, AssertSqlSafe, PgPool, Postgres, Transaction};

/// Now on PostgreSQL's clock, in Unix milliseconds.
const NOW_MS: &str = "(EXTRACT(EPOCH FROM clock_timestamp()) * 1000)::bigint";

/// The hand-written steps' tables: an inbox and its steps table.
pub(super) struct ByHand {
    pub(super) inbox: String,
    pub(super) steps: String,
    pub(super) picks: String,
}

impl ByHand {
    /// One message's three steps and final commit; `false` when another run holds it or it
    /// was handled.
    pub(super) async fn run(&self, pool: &PgPool, handler: &str, id: &str) -> sqlx::Result<bool> {
        // A redelivery of a handled message: one read, no write.
        let handled = format!(
            "SELECT count(*) FROM {} WHERE handler = $1 AND message_id = $2",
            self.inbox
        );
        let handled: i64 = sqlx::query_scalar(AssertSqlSafe(handled))
            .bind(handler)
            .bind(id)
            .fetch_one(pool)
            .await?;
        if handled > 0 {
            return Ok(false);
        }
        let token: i64 = fastrand::i64(..);
        let claim = format!(
            "INSERT INTO {} (handler, message_id, place, name, token, lease_until) \
             VALUES ($1, $2, 0, '', $3, {NOW_MS} + 30000) ON CONFLICT DO NOTHING",
            self.steps
        );
        let claimed = sqlx::query(AssertSqlSafe(claim))
            .bind(handler)
            .bind(id)
            .bind(token)
            .execute(pool)
            .await?
            .rows_affected();
        if claimed == 0 {
            return Ok(false);
        }
        // The journal, and whether a run handled the message since the first read.
        let journal = format!(
            "SELECT place, name, result FROM {steps} WHERE handler = $1 AND message_id = $2 \
             AND place > 0 UNION ALL SELECT -1, '', NULL FROM {inbox} \
             WHERE handler = $1 AND message_id = $2 ORDER BY 1",
            steps = self.steps,
            inbox = self.inbox
        );
        let done: Vec<(i32, String, Option<Vec<u8>>)> = sqlx::query_as(AssertSqlSafe(journal))
            .bind(handler)
            .bind(id)
            .fetch_all(pool)
            .await?;
        if done.first().is_some_and(|(place, ..)| *place < 0) {
            return Ok(false);
        }
        let step = |place: i64, name: &'static str| (place, name);
        // The first external step: its (no-op) call, then its journal row with the guard, in
        // one statement.
        self.journal_external(pool, handler, id, token, step(1, "a"), b"\"a\"")
            .await?;
        // The database step: its write and its journal row together.
        let mut tx = pool.begin().await?;
        self.guard(&mut tx, handler, id, token).await?;
        let pick = format!("INSERT INTO {} (event) VALUES ($1)", self.picks);
        sqlx::query(AssertSqlSafe(pick))
            .bind(id)
            .execute(&mut *tx)
            .await?;
        self.record(&mut tx, handler, id, token, step(2, "reserve"), b"null")
            .await?;
        tx.commit().await?;
        // The second external step.
        self.journal_external(pool, handler, id, token, step(3, "b"), b"\"b\"")
            .await?;
        // The final commit: the guard, the inbox's claim, the journal forgotten.
        let mut tx = pool.begin().await?;
        self.guard(&mut tx, handler, id, token).await?;
        let inbox = format!(
            "INSERT INTO {} (handler, message_id) VALUES ($1, $2) ON CONFLICT DO NOTHING",
            self.inbox
        );
        sqlx::query(AssertSqlSafe(inbox))
            .bind(handler)
            .bind(id)
            .execute(&mut *tx)
            .await?;
        let forget = format!(
            "DELETE FROM {} WHERE handler = $1 AND message_id = $2",
            self.steps
        );
        sqlx::query(AssertSqlSafe(forget))
            .bind(handler)
            .bind(id)
            .execute(&mut *tx)
            .await?;
        tx.commit().await?;
        Ok(true)
    }

    /// Renews the run's lease by its token and journals an external step, in one statement.
    async fn journal_external(
        &self,
        pool: &PgPool,
        handler: &str,
        id: &str,
        token: i64,
        (place, name): (i64, &str),
        result: &[u8],
    ) -> sqlx::Result<()> {
        let steps = &self.steps;
        let journal = format!(
            "WITH run AS (UPDATE {steps} SET lease_until = {NOW_MS} + 30000 \
             WHERE handler = $1 AND message_id = $2 AND place = 0 AND token = $3 RETURNING token) \
             INSERT INTO {steps} (handler, message_id, place, name, token, lease_until, result) \
             SELECT $1, $2, $4, $5, token, {NOW_MS}, $6 FROM run"
        );
        let written = sqlx::query(AssertSqlSafe(journal))
            .bind(handler)
            .bind(id)
            .bind(token)
            .bind(place)
            .bind(name)
            .bind(result)
            .execute(pool)
            .await?
            .rows_affected();
        if written == 1 {
            Ok(())
        } else {
            Err(sqlx::Error::RowNotFound)
        }
    }

    async fn guard(
        &self,
        tx: &mut Transaction<'static, Postgres>,
        handler: &str,
        id: &str,
        token: i64,
    ) -> sqlx::Result<()> {
        let renew = format!(
            "UPDATE {} SET lease_until = {NOW_MS} + 30000 \
             WHERE handler = $1 AND message_id = $2 AND place = 0 AND token = $3",
            self.steps
        );
        let renewed = sqlx::query(AssertSqlSafe(renew))
            .bind(handler)
            .bind(id)
            .bind(token)
            .execute(&mut **tx)
            .await?
            .rows_affected();
        if renewed == 1 {
            Ok(())
        } else {
            Err(sqlx::Error::RowNotFound)
        }
    }

    async fn record(
        &self,
        tx: &mut Transaction<'static, Postgres>,
        handler: &str,
        id: &str,
        token: i64,
        (place, name): (i64, &str),
        result: &[u8],
    ) -> sqlx::Result<()> {
        let record = format!(
            "INSERT INTO {} (handler, message_id, place, name, token, lease_until, result) \
             VALUES ($1, $2, $3, $4, $5, {NOW_MS}, $6)",
            self.steps
        );
        sqlx::query(AssertSqlSafe(record))
            .bind(handler)
            .bind(id)
            .bind(place)
            .bind(name)
            .bind(token)
            .bind(result)
            .execute(&mut **tx)
            .await?;
        Ok(())
    }
}
