//! Creating the inbox table.

use crate::backend::Backend;
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
        DB::migrate(conn, &self.sql.common).await?;
        tracing::info!(backend = DB::BACKEND, table = %self.table(), "guestlist inbox table ready");
        Ok(())
    }
}
