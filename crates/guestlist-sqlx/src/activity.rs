//! What the tables' own timestamps say happened, a minute at a time: messages a handler
//! claimed (the inbox's `seen_at`), messages dead-lettered (`<inbox>_dead`'s `dead_at`),
//! messages written to the outbox and published (`created_at`, `published_at`: the rows a relay
//! keeps), keys taken (the key table's `created_at`). Rows a purge deleted, or a relay that
//! keeps no published row, leave no trace here.

use std::sync::Arc;
use std::time::Duration;

use crate::backend::history::HistoryStatements;
use crate::backend::statement::Plain;
use crate::backend::steps::StepsStatements;
use crate::{Backend, Error, Inbox, Outbox, SqlKeyStore};

/// How many of something happened in one minute.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct PerMinute {
    /// What: a handler's name, `written`, `published`, `taken`.
    pub name: String,
    /// The minute, in minutes since the Unix epoch.
    pub minute: i64,
    /// How many.
    pub count: u64,
}

/// One activity query's text.
pub(crate) struct ActivitySql {
    text: Arc<str>,
}

/// The count per name and minute of `table`'s rows whose timestamp `at` is within `over`:
/// `name` is an expression (a column, or a quoted word); `ms` says `at` holds Unix
/// milliseconds rather than a timestamp.
fn per_minute_sql<DB: HistoryStatements + StepsStatements>(
    table: &str,
    name: &str,
    at: &str,
    ms: bool,
    over: Duration,
) -> ActivitySql {
    let div = DB::DIV;
    let (minute, since) = if ms {
        let from = crate::unix_ms::now()
            .saturating_sub(i64::try_from(over.as_millis()).unwrap_or(i64::MAX));
        (format!("({at} {div} 60000)"), format!("{at} >= {from}"))
    } else {
        let epoch = DB::EPOCH_MS.replace("{at}", at);
        let ago = DB::AGO.replace("{secs}", &over.as_secs().to_string());
        (format!("(({epoch}) {div} 60000)"), format!("{at} >= {ago}"))
    };
    ActivitySql {
        text: format!(
            "SELECT {name}, {minute}, COUNT(*) FROM {table} WHERE {since} GROUP BY 1, 2 \
             ORDER BY 2"
        )
        .into(),
    }
}

/// Runs an activity query on `pool`.
async fn run<DB: Backend>(
    pool: &sqlx::Pool<DB>,
    sql: ActivitySql,
) -> Result<Vec<PerMinute>, sqlx::Error> {
    let mut conn = pool.acquire().await?;
    let read = Plain::reading(|sql: &ActivitySql| &sql.text, ());
    let rows: Vec<(String, i64, i64)> = DB::fetch(&mut conn, &sql, read).await?;
    Ok(rows
        .into_iter()
        .map(|(name, minute, count)| PerMinute {
            name,
            minute,
            count: u64::try_from(count).unwrap_or(0),
        })
        .collect())
}

impl<DB: Backend> Inbox<DB> {
    /// The messages each handler claimed, per minute, within `over`.
    pub async fn handled_per_minute(
        &self,
        pool: &sqlx::Pool<DB>,
        over: Duration,
    ) -> Result<Vec<PerMinute>, Error> {
        let handler = <DB as StepsStatements>::TEXT.replace("{col}", "handler");
        let sql = per_minute_sql::<DB>(self.table().as_str(), &handler, "seen_at", false, over);
        run(pool, sql).await.map_err(|err| self.error(err))
    }

    /// The messages each handler dead-lettered, per minute, within `over`.
    pub async fn dead_lettered_per_minute(
        &self,
        pool: &sqlx::Pool<DB>,
        over: Duration,
    ) -> Result<Vec<PerMinute>, Error> {
        let handler = <DB as StepsStatements>::TEXT.replace("{col}", "handler");
        let table = format!("{}_dead", self.table());
        let sql = per_minute_sql::<DB>(&table, &handler, "dead_at", true, over);
        run(pool, sql).await.map_err(|err| self.dead_error(err))
    }
}

impl<DB: Backend> Outbox<DB> {
    /// The messages written (`written`) and published (`published`: only those a relay keeps,
    /// `guestlist relay --keep-published`) per minute, within `over`, as the rows still in the
    /// table say.
    pub async fn activity_per_minute(
        &self,
        pool: &sqlx::Pool<DB>,
        over: Duration,
    ) -> Result<Vec<PerMinute>, Error> {
        let table = self.table().as_str();
        let mut all = Vec::new();
        for (name, at) in [("'written'", "created_at"), ("'published'", "published_at")] {
            let sql = per_minute_sql::<DB>(table, name, at, false, over);
            all.extend(
                run(pool, sql)
                    .await
                    .map_err(|err| Error::from_store::<DB>(self.table(), err))?,
            );
        }
        Ok(all)
    }
}

impl<DB: Backend> SqlKeyStore<DB> {
    /// The keys taken per minute within `over` (`taken`), as the key table's rows say.
    pub async fn taken_per_minute(&self, over: Duration) -> Result<Vec<PerMinute>, Error> {
        let table = self.sql.common.table.clone();
        let sql = per_minute_sql::<DB>(table.as_str(), "'taken'", "created_at", false, over);
        run(self.pool(), sql)
            .await
            .map_err(|err| Error::from_store::<DB>(&table, err))
    }
}
