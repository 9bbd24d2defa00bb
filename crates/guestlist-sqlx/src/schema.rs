//! Creating an application's own tables the way guestlist creates its own: one process at a time.

use crate::Error;
use crate::backend::Backend;

/// An application's own schema statements, run the way guestlist creates its own tables: one
/// process at a time.
///
/// Two services that start together on a fresh PostgreSQL database and both run
/// `CREATE TABLE IF NOT EXISTS orders …` can both find the table missing, and one then dies on
/// `duplicate key value violates unique constraint "pg_type_typname_nsp_index"`: `IF NOT EXISTS`
/// is no lock. [`Schema::migrate`] runs the statements holding a lock that every `Schema` on the
/// database (on PostgreSQL, in the current schema) shares: a transaction-scoped advisory lock on
/// PostgreSQL, `GET_LOCK` on MySQL, the write lock on SQLite. The next process waits, then finds
/// the tables there.
///
/// The statements run again at every start, so each must be safe to repeat (`IF NOT EXISTS`).
/// On PostgreSQL and SQLite they run in one transaction and commit together (so no
/// `CREATE INDEX CONCURRENTLY`); on MySQL each DDL statement commits on its own. They are run as
/// given: never format untrusted input into them.
///
/// ```no_run
/// # async fn run(pool: sqlx::PgPool) -> Result<(), guestlist_sqlx::Error> {
/// use guestlist_sqlx::Schema;
///
/// let shop = Schema::new([
///     "CREATE TABLE IF NOT EXISTS orders (id BIGINT PRIMARY KEY, status TEXT NOT NULL)",
///     "CREATE TABLE IF NOT EXISTS pick_tasks (order_id BIGINT NOT NULL, event TEXT NOT NULL)",
/// ]);
/// shop.migrate(&pool).await?; // at every start-up, from every instance at once
/// # Ok(()) }
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Schema {
    statements: Vec<String>,
}

/// The lock every [`Schema`] of a database takes turns with: one for all, so that two schemas
/// that happen to create the same table still take turns.
const SCHEMA_LOCK: &str = "guestlist_schema";

impl Schema {
    /// A schema of `statements`, which run in the order given.
    pub fn new(statements: impl IntoIterator<Item = impl Into<String>>) -> Self {
        Self {
            statements: statements.into_iter().map(Into::into).collect(),
        }
    }

    /// Runs the statements on a connection of `pool`, after any other process's `Schema` on
    /// the same database has finished.
    pub async fn migrate<DB: Backend>(&self, pool: &sqlx::Pool<DB>) -> Result<(), Error> {
        let mut conn = pool.acquire().await?;
        self.migrate_on::<DB>(&mut conn).await
    }

    /// [`Schema::migrate`] on a connection of the caller's. It must not be inside a
    /// transaction on MySQL, where DDL commits.
    pub async fn migrate_on<DB: Backend>(&self, conn: &mut DB::Connection) -> Result<(), Error> {
        DB::migrate(conn, SCHEMA_LOCK, &self.statements).await?;
        tracing::info!(
            backend = DB::BACKEND,
            statements = self.statements.len(),
            "schema ready"
        );
        Ok(())
    }
}
