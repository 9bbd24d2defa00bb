//! The inbox table's upkeep: creating it, and purging the rows past their retention.

use std::sync::Arc;

use guestlist_core::Retention;

use crate::backend::steps::StepsSql;
use crate::backend::{Backend, TableSql};
use crate::purge::{Purge, Purgeable, sealed};
use crate::{Error, Inbox};

impl<DB: Backend> Inbox<DB> {
    /// Creates the table and its `seen_at` index if they are missing. Safe to run from several
    /// processes at once and at every start-up.
    pub async fn migrate(&self, pool: &sqlx::Pool<DB>) -> Result<(), Error> {
        let mut conn = pool.acquire().await?;
        self.migrate_on(&mut conn).await
    }

    /// [`Inbox::migrate`] on a connection of the caller's (one that runs the application's own
    /// migrations, say). It must not be inside a transaction on MySQL, where DDL commits.
    pub async fn migrate_on(&self, conn: &mut DB::Connection) -> Result<(), Error> {
        self.sql.common.migrate::<DB>(conn).await?;
        tracing::info!(backend = DB::BACKEND, table = %self.table(), "guestlist inbox table ready");
        Ok(())
    }

    /// A purge of the rows older than `retention` (run it with [`Purge::run`]), and of the
    /// steps journals of messages left mid-steps (dead-lettered, or given up) whose run was
    /// last touched longer ago.
    pub fn purge(&self, retention: Retention) -> Purge<'_, DB> {
        Purge::new(&self.sql.common, retention).with_journals(Some(&self.steps))
    }
}

impl<DB: Backend> sealed::Sealed for Inbox<DB> {}

impl<DB: Backend> Purgeable<DB> for Inbox<DB> {
    fn purge_table(&self) -> Arc<TableSql> {
        Arc::clone(&self.sql.common)
    }

    fn purge_journals(&self) -> Option<Arc<StepsSql>> {
        Some(Arc::clone(&self.steps))
    }
}
