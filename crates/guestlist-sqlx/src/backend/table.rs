//! SQL text every guestlist table needs (its name, its DDL, its purge and size), and the DDL
//! files read into statements.

use std::sync::Arc;

use guestlist_core::TableName;

use super::statement::Codec;
use super::{Backend, sealed};

/// What live traffic does to a table's rows once they are in, which decides how the purge treats
/// a row a live transaction holds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Rows {
    /// Inserted and never changed (the inbox, the outbox's published rows): nothing but a purge
    /// ever locks an old row, so the purge deletes without locking first, which on PostgreSQL
    /// halves the WAL a batch writes (each locked row logs its lock, then its deletion).
    Appended,
    /// Changed in place by live requests (the key store's in-flight rows): the purge skips a row a
    /// live transaction holds instead of waiting for it.
    Rewritten,
}

/// SQL text every guestlist table needs: its name, its DDL, and its purge.
#[derive(Debug)]
#[allow(unreachable_pub)] // named by the sealed traits, unreachable outside the crate
pub struct TableSql {
    pub(crate) table: TableName,
    /// Deletes at most `limit` rows older than a number of seconds (PostgreSQL: and none older
    /// than a resume point).
    pub(crate) purge_batch: Arc<str>,
    /// Counts rows older than a number of seconds.
    pub(crate) count_older: Arc<str>,
    /// Reads the table's size: table bytes, index bytes, dead rows, free bytes.
    pub(crate) size: Arc<str>,
    /// The DDL, one statement per entry.
    pub(crate) ddl: Vec<String>,
}

impl TableSql {
    /// Formats `DB`'s purge templates for `table`, whose age is in the column `at` and whose rows
    /// live traffic treats as `rows` says, and its DDL file, written for the table `default_name`.
    pub(crate) fn new<DB: sealed::Statements>(
        table: &TableName,
        at: &str,
        rows: Rows,
        ddl: &str,
        default_name: &str,
    ) -> Self {
        let fill = |template: &str| -> Arc<str> {
            template
                .replace("{table}", table.as_str())
                .replace("{at}", at)
                .replace(
                    "{skip_locked}",
                    match rows {
                        Rows::Appended => "",
                        Rows::Rewritten => " FOR UPDATE SKIP LOCKED",
                    },
                )
                .into()
        };
        Self {
            table: table.clone(),
            purge_batch: fill(DB::PURGE_BATCH),
            count_older: fill(DB::COUNT_OLDER),
            size: fill(DB::TABLE_SIZE),
            ddl: ddl_statements(ddl, default_name, table.as_str()),
        }
    }

    /// The name of the lock purgers of this table take turns with.
    pub(crate) fn purge_lock(&self) -> String {
        format!("guestlist_purge_{}", self.table)
    }

    /// The name of the lock migrations of this table take turns with.
    fn migrate_lock(&self) -> String {
        format!("guestlist_migrate_{}", self.table)
    }

    /// Runs the table's DDL on `conn`, after any other process migrating it has finished.
    pub(crate) async fn migrate<DB: Backend>(
        &self,
        conn: &mut DB::Connection,
    ) -> Result<(), sqlx::Error> {
        DB::migrate(conn, &self.migrate_lock(), &self.ddl).await
    }
}

/// Formats templates for `table`: each `{table}` becomes its name.
pub(crate) fn filler(table: &TableName) -> impl Fn(&str) -> Arc<str> + '_ {
    move |template| template.replace("{table}", table.as_str()).into()
}

/// Runs each DDL statement in turn on `conn`, stopping at the first that fails. An `ALTER TABLE`
/// whose failure `added_already` recognises (a column that is there: the databases without
/// `ADD COLUMN IF NOT EXISTS` upgrade a table that way, and a table made after the column came
/// has it) counts as done.
pub(crate) async fn run_ddl<DB: Codec>(
    conn: &mut DB::Connection,
    ddl: &[String],
    added_already: fn(&sqlx::Error) -> bool,
) -> Result<(), sqlx::Error> {
    for statement in ddl {
        let query = sqlx::query(sqlx::AssertSqlSafe(statement.as_str()));
        match DB::run_query(conn, query).await {
            Err(err) if statement.starts_with("ALTER TABLE") && added_already(&err) => {}
            outcome => {
                outcome?;
            }
        }
    }
    Ok(())
}

/// A table's size as read: table bytes, index bytes, dead rows, free bytes.
#[allow(unreachable_pub)] // named by the sealed traits, unreachable outside the crate
pub type SizeRow = (Option<i64>, Option<i64>, Option<i64>, Option<i64>);

/// Splits a DDL file into statements, dropping `--` comment lines and renaming the table.
pub(crate) fn ddl_statements(file: &str, default_name: &str, table: &str) -> Vec<String> {
    let code: String = file
        .lines()
        .filter(|line| !line.trim_start().starts_with("--"))
        .collect::<Vec<_>>()
        .join("\n");
    split_statements(&code)
        .into_iter()
        .map(str::trim)
        .filter(|statement| !statement.is_empty())
        .map(|statement| statement.replace(default_name, table))
        .collect()
}

/// `code` cut at each `;` that is not inside a `$$`-quoted body (a PostgreSQL function's).
pub(crate) fn split_statements(code: &str) -> Vec<&str> {
    let mut statements = Vec::new();
    let (mut start, mut quoted) = (0, false);
    let bytes = code.as_bytes();
    let mut at = 0;
    while at < bytes.len() {
        if code[at..].starts_with("$$") {
            quoted = !quoted;
            at += 2;
            continue;
        }
        if bytes[at] == b';' && !quoted {
            statements.push(&code[start..at]);
            start = at + 1;
        }
        at += 1;
    }
    statements.push(&code[start..]);
    statements
}

#[cfg(test)]
mod tests {
    use super::split_statements;

    #[test]
    fn a_dollar_quoted_body_stays_in_one_statement() {
        let code = "CREATE TABLE t (a INT);\nCREATE FUNCTION f() RETURNS trigger AS $$\nBEGIN\n    \
                    PERFORM 1;\n    RETURN NULL;\nEND\n$$;\nDO $$ BEGIN NULL; END $$;";
        let statements: Vec<&str> = split_statements(code)
            .into_iter()
            .map(str::trim)
            .filter(|s| !s.is_empty())
            .collect();
        assert_eq!(statements.len(), 3, "{statements:#?}");
        assert!(statements[1].contains("PERFORM 1;") && statements[1].ends_with("$$"));
        assert_eq!(statements[2], "DO $$ BEGIN NULL; END $$");
    }
}
