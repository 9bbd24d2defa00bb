//! The three-step message written by hand with sqlx on PostgreSQL: the statements guestlist
//! sends, without guestlist around them (a run row with a lease and a fencing token, written
//! unless the inbox holds the message; a second look at the inbox; an external step's journal
//! row and the guard in one statement; a database step's writes, then its journal row and the
//! guard on the same transaction; the final commit's guard, the inbox's claim and the journal
//! forgotten in one statement).

use guestlist::sqlx::{self, AssertSqlSafe, PgPool};

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
        let (steps, inbox) = (&self.steps, &self.inbox);
        let token: i64 = fastrand::i64(..);
        // The run row, unless the inbox holds the message (a redelivery: nothing written).
        let claim = format!(
            "WITH claimed AS (INSERT INTO {steps} \
             (handler, message_id, place, name, token, lease_until) \
             SELECT $1, $2, 0, '', $3, {NOW_MS} + 30000 WHERE NOT EXISTS \
             (SELECT 1 FROM {inbox} WHERE handler = $1 AND message_id = $2) \
             ON CONFLICT DO NOTHING RETURNING 1) SELECT count(*) FROM claimed"
        );
        let claimed: i64 = sqlx::query_scalar(AssertSqlSafe(claim))
            .bind(handler)
            .bind(id)
            .bind(token)
            .fetch_one(pool)
            .await?;
        if claimed == 0 {
            return Ok(false);
        }
        // Whether a run handled the message since (a statement of its own sees it).
        let handled =
            format!("SELECT count(*) FROM {inbox} WHERE handler = $1 AND message_id = $2");
        let handled: i64 = sqlx::query_scalar(AssertSqlSafe(handled))
            .bind(handler)
            .bind(id)
            .fetch_one(pool)
            .await?;
        if handled > 0 {
            return Ok(false);
        }
        let step = |place: i64, name: &'static str| (place, name);
        // The first external step: its (no-op) call, then its journal row with the guard, in
        // one statement.
        self.journal(pool, handler, id, token, step(1, "a"), b"\"a\"")
            .await?;
        // The database step: its write, then its journal row with the guard, committed together.
        let mut tx = pool.begin().await?;
        let pick = format!("INSERT INTO {} (event) VALUES ($1)", self.picks);
        sqlx::query(AssertSqlSafe(pick))
            .bind(id)
            .execute(&mut *tx)
            .await?;
        self.journal(&mut *tx, handler, id, token, step(2, "reserve"), b"null")
            .await?;
        tx.commit().await?;
        // The second external step.
        self.journal(pool, handler, id, token, step(3, "b"), b"\"b\"")
            .await?;
        // The final commit: the guard (the run row locked), the inbox's claim and the journal
        // forgotten, in one statement.
        let mut tx = pool.begin().await?;
        let last = format!(
            "WITH run AS (SELECT 1 FROM {steps} WHERE handler = $1 AND message_id = $2 \
             AND place = 0 AND token = $3 FOR NO KEY UPDATE), \
             claimed AS (INSERT INTO {inbox} (handler, message_id) SELECT $1, $2 FROM run \
             ON CONFLICT DO NOTHING RETURNING 1), \
             forgot AS (DELETE FROM {steps} WHERE handler = $1 AND message_id = $2 \
             AND EXISTS (SELECT 1 FROM run) RETURNING 1) \
             SELECT count(*) FROM claimed"
        );
        let claimed: i64 = sqlx::query_scalar(AssertSqlSafe(last))
            .bind(handler)
            .bind(id)
            .bind(token)
            .fetch_one(&mut *tx)
            .await?;
        if claimed != 1 {
            return Err(sqlx::Error::RowNotFound);
        }
        tx.commit().await?;
        Ok(true)
    }

    /// Renews the run's lease by its token and journals a step, in one statement, on `conn`.
    async fn journal<'c>(
        &self,
        conn: impl sqlx::PgExecutor<'c>,
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
            .execute(conn)
            .await?
            .rows_affected();
        if written == 1 {
            Ok(())
        } else {
            Err(sqlx::Error::RowNotFound)
        }
    }
}
