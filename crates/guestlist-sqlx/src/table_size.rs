//! How much room a guestlist table takes, as its database reports it.

use crate::backend::statement::Plain;
use crate::backend::table::SizeRow;
use crate::backend::{Backend, TableSql};

/// A table's size at one moment. Each figure is `None` where the database does not report it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
#[non_exhaustive]
pub struct TableSize {
    /// The rows' own pages: PostgreSQL's `pg_table_size` (with TOAST and the free space and
    /// visibility maps), InnoDB's `data_length` (the clustered primary key), SQLite's table
    /// b-tree.
    pub table_bytes: Option<u64>,
    /// The indexes' pages (InnoDB: the secondary indexes only, as the primary key holds the
    /// rows).
    pub index_bytes: Option<u64>,
    /// Deleted rows not yet vacuumed, PostgreSQL's estimate (`n_dead_tup`). A purge leaves
    /// them behind until (auto)vacuum runs; InnoDB and SQLite keep none.
    pub dead_rows: Option<u64>,
    /// Free space the database keeps for reuse: InnoDB's `data_free`, SQLite's free-list
    /// pages (the whole file's).
    pub free_bytes: Option<u64>,
}

impl TableSize {
    /// The table's and its indexes' bytes together, where both are known.
    pub fn total_bytes(&self) -> Option<u64> {
        Some(self.table_bytes? + self.index_bytes?)
    }

    pub(crate) async fn read<DB: Backend>(
        conn: &mut DB::Connection,
        table: &TableSql,
    ) -> Result<Self, sqlx::Error> {
        let size: Plain<TableSql, (), SizeRow> = Plain::reading(|sql| &sql.size, ());
        let (table_bytes, index_bytes, dead_rows, free_bytes) =
            DB::fetch_one(conn, table, size).await?;
        let unsigned = |n: Option<i64>| n.map(|n| u64::try_from(n).unwrap_or(0));
        Ok(Self {
            table_bytes: unsigned(table_bytes),
            index_bytes: unsigned(index_bytes),
            dead_rows: unsigned(dead_rows),
            free_bytes: unsigned(free_bytes),
        })
    }
}
