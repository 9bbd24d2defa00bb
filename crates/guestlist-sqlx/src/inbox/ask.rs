//! Asking the inbox without claiming: whether a handler holds an id already, and whether the
//! inbox's tables are there for a consumer about to start.

use guestlist_core::{HandlerName, MessageId};

use super::Inbox;
use crate::Error;
use crate::backend::Backend;

impl<DB: Backend> Inbox<DB> {
    /// Whether `handler` holds `id` already (a message handled and committed), asked the
    /// inbox's way: a claim on a transaction of its own that is then rolled back, so that it
    /// waits for a claim of `id` in flight on another transaction to end instead of guessing.
    /// It changes nothing and is counted in no metric.
    ///
    /// ```no_run
    /// # async fn f(pool: sqlx::PgPool) -> Result<(), guestlist_sqlx::Error> {
    /// use guestlist_core::{HandlerName, MessageId};
    /// let inbox = guestlist_sqlx::Inbox::<sqlx::Postgres>::new();
    /// let warehouse = HandlerName::new("warehouse")?;
    /// if inbox.holds(&pool, &warehouse, &MessageId::new("evt_9f3k")?).await? {
    ///     println!("evt_9f3k was handled");
    /// }
    /// # Ok(()) }
    /// ```
    pub async fn holds(
        &self,
        pool: &sqlx::Pool<DB>,
        handler: &HandlerName,
        id: &MessageId,
    ) -> Result<bool, Error> {
        let mut tx = self.begin(pool).await?;
        let inserted = DB::claim(&mut *tx, &self.sql, handler.as_str(), id.as_str())
            .await
            .map_err(|err| self.claim_error(err))?;
        tx.rollback().await?;
        Ok(!inserted)
    }

    /// Checks that the inbox's tables (its own and `<table>_deferrals`) are there and take a
    /// claim, for `handler`: [`Error::MissingTable`] says what to run when one is missing. A
    /// consumer runs it before it fetches anything; a service may run it at start-up. It
    /// changes nothing and is counted in no metric.
    pub async fn check(&self, pool: &sqlx::Pool<DB>, handler: &HandlerName) -> Result<(), Error> {
        let probe = MessageId::new("guestlist-check").expect("a valid message id");
        self.holds(pool, handler, &probe).await?;
        self.deferrals(pool, handler, &probe).await?;
        Ok(())
    }
}
