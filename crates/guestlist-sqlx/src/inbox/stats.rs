//! The inbox's figures, for operators (`guestlist stats`) and capacity planning.

use std::time::Duration;

use crate::backend::Backend;
use crate::backend::InboxSql;
use crate::backend::inbox::HandlerRow;
use crate::backend::statement::Plain;
use crate::table_size::TableSize;
use crate::{Error, Inbox};

/// An inbox's figures at one moment.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct InboxStats {
    /// Rows in the table: ids claimed and not yet purged.
    pub rows: u64,
    /// The oldest row's age. Past the retention, the purge is behind (or not running).
    pub oldest: Option<Duration>,
    /// Each handler's rows, in the handlers' order.
    pub handlers: Vec<HandlerRows>,
    /// The table's and its indexes' size, and what a purge left behind.
    pub size: TableSize,
}

/// One handler's part of an inbox.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct HandlerRows {
    /// The handler's name.
    pub handler: String,
    /// The ids it has claimed that are still kept.
    pub rows: u64,
    /// Its oldest row's age.
    pub oldest: Option<Duration>,
}

impl InboxStats {
    /// Bytes per row, table and indexes together, where the database reports both sizes and the
    /// table holds rows.
    pub fn bytes_per_row(&self) -> Option<f64> {
        let total = self.size.total_bytes()?;
        (self.rows > 0).then(|| total as f64 / self.rows as f64)
    }
}

impl<DB: Backend> Inbox<DB> {
    /// Reads the inbox's figures.
    ///
    /// The row counts are exact, so they read the whole table: about a second per ten million
    /// rows on PostgreSQL. The sizes are the database's own figures (InnoDB's are estimates
    /// its statistics refresh).
    pub async fn stats(&self, pool: &sqlx::Pool<DB>) -> Result<InboxStats, Error> {
        let read = async {
            let mut conn = pool.acquire().await?;
            let handlers = DB::fetch(&mut conn, &*self.sql, handlers()).await?;
            let size = TableSize::read::<DB>(&mut conn, &self.sql.common).await?;
            Ok::<_, sqlx::Error>((handlers, size))
        };
        let (handlers, size) = read
            .await
            .map_err(|err| Error::from_store::<DB>(self.table(), err))?;
        let handlers: Vec<HandlerRows> = handlers
            .into_iter()
            .map(|row| HandlerRows {
                handler: row.handler,
                rows: u64::try_from(row.rows).unwrap_or(0),
                oldest: row
                    .oldest_ms
                    .map(|ms| Duration::from_millis(u64::try_from(ms).unwrap_or(0))),
            })
            .collect();
        Ok(InboxStats {
            rows: handlers.iter().map(|h| h.rows).sum(),
            oldest: handlers.iter().filter_map(|h| h.oldest).max(),
            handlers,
            size,
        })
    }
}

/// The statement that reads each handler's rows and its oldest row's age, in the handlers'
/// order.
fn handlers() -> Plain<InboxSql, (), HandlerRow> {
    Plain::reading(|sql: &InboxSql| &sql.handlers, ())
}
