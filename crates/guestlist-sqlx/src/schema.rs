//! Creating the inbox table.

use crate::backend::Backend;
use crate::{Error, Inbox};

impl<DB: Backend> Inbox<DB> {
    /// Creates the table and its `seen_at` index if they are missing. Safe to run from several
    /// processes at once and at every start-up.
    pub async fn migrate(&self, pool: &sqlx::Pool<DB>) -> Result<(), Error> {
        let mut conn = pool.acquire().await?;
        DB::migrate(&mut conn, &self.sql).await?;
        tracing::info!(backend = DB::BACKEND, table = %self.table(), "guestlist inbox table ready");
        Ok(())
    }
}
