//! A transaction of the caller's own, run again after a deadlock: for users of bare claims.

use sqlx::Pool;

use super::process::with_retries;
use crate::backend::Backend;
use crate::{Error, Inbox, ProcessError, WorkError};

/// The label retries of [`Inbox::transaction`] are counted under.
const LABEL: &str = "transaction";

impl<DB: Backend> Inbox<DB> {
    /// Runs `work` on a fresh transaction begun as [`Inbox::begin`] does (`BEGIN IMMEDIATE` on
    /// SQLite), commits when it returns `Ok`, and rolls back when it returns `Err`. A deadlock,
    /// serialization failure or busy database, in the store or anywhere in the work's error chain
    /// (see [`WorkError`]), runs the whole transaction again, as [`Inbox::process`] does: this is
    /// the retry a bare [`Inbox::claim`] needs (on MySQL and MariaDB two concurrent claims of one
    /// id can deadlock, and only a new transaction settles it).
    ///
    /// `work` may be called more than once, each time on a fresh transaction; it never commits
    /// twice. The same rules as [`Inbox::process`] apply to what it captures.
    ///
    /// ```
    /// # #[cfg(feature = "sqlite")]
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// use guestlist_sqlx::{Claim, HandlerName, Inbox, MessageId};
    /// # let pool = sqlx::SqlitePool::connect("sqlite::memory:").await?;
    /// let inbox = Inbox::<sqlx::Sqlite>::new();
    /// inbox.migrate(&pool).await?;
    /// # sqlx::query("CREATE TABLE pick_tasks (order_id INTEGER)").execute(&pool).await?;
    ///
    /// let warehouse = HandlerName::new("warehouse")?;
    /// let event = MessageId::new("evt_9f3k")?;
    /// for _delivery in 0..3 {
    ///     let claim = inbox
    ///         .transaction(&pool, async |tx| {
    ///             let claim = inbox.claim(tx, &warehouse, &event).await?;
    ///             if claim == Claim::Fresh {
    ///                 sqlx::query("INSERT INTO pick_tasks VALUES (42)").execute(&mut *tx).await?;
    ///             }
    ///             Ok::<_, anyhow::Error>(claim)
    ///         })
    ///         .await?;
    ///     println!("{claim:?}");
    /// }
    /// let tasks: i64 = sqlx::query_scalar("SELECT count(*) FROM pick_tasks").fetch_one(&pool).await?;
    /// assert_eq!(tasks, 1);
    /// # Ok(()) }
    /// # #[cfg(not(feature = "sqlite"))] fn main() {}
    /// ```
    pub async fn transaction<T, E, F>(
        &self,
        pool: &Pool<DB>,
        mut work: F,
    ) -> Result<T, ProcessError<E>>
    where
        F: AsyncFnMut(&mut DB::Connection) -> Result<T, E>,
        E: WorkError,
    {
        with_retries!(self, LABEL, self.transaction_once(pool, &mut work))
    }

    /// One attempt of [`Inbox::transaction`].
    async fn transaction_once<T, E, F>(
        &self,
        pool: &Pool<DB>,
        work: &mut F,
    ) -> Result<T, ProcessError<E>>
    where
        F: AsyncFnMut(&mut DB::Connection) -> Result<T, E>,
    {
        let mut tx = DB::begin(pool).await?;
        // Dropping the transaction on an error rolls it back.
        let output = work(&mut tx).await.map_err(ProcessError::Handler)?;
        tx.commit().await.map_err(Error::from_commit)?;
        Ok(output)
    }
}
