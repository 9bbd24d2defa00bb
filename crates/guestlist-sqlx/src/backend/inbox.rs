//! The inbox's SQL: its text, formatted once per table, and its statements as typed values.

use std::sync::Arc;

use guestlist_core::TableName;

use super::statement::{Args, Bound, Codec, Statement, row};
use super::table::{Rows, filler};
use super::{TableSql, sealed};

/// SQL text for one inbox table, formatted once when the [`crate::Inbox`] is built.
#[derive(Debug)]
#[allow(unreachable_pub)] // named by the sealed traits, unreachable outside the crate
pub struct InboxSql {
    pub(crate) common: Arc<TableSql>,
    /// Inserts one row; reports 1 row for fresh.
    pub(crate) claim: Arc<str>,
    /// Inserts a sorted batch; returns the fresh ids (MySQL claims a batch one id at a time).
    #[cfg_attr(not(any(feature = "postgres", feature = "sqlite")), allow(dead_code))]
    pub(crate) claim_batch: Arc<str>,
    /// Counts one deferral of a message: handler, id, now in Unix milliseconds.
    pub(crate) defer: Arc<str>,
    /// Reads a message's deferrals and the first one's time: handler, id.
    pub(crate) deferrals: Arc<str>,
    /// Forgets a message's deferrals: handler, id.
    pub(crate) forget_deferrals: Arc<str>,
    /// Each handler's rows and its oldest row's age in milliseconds.
    pub(crate) handlers: Arc<str>,
}

impl InboxSql {
    pub(crate) fn new<DB: sealed::Statements>(table: &TableName) -> Self {
        let fill = filler(table);
        Self {
            common: Arc::new(TableSql::new::<DB>(
                table,
                "seen_at",
                Rows::Appended,
                DB::INBOX_DDL,
                "guestlist_inbox",
            )),
            claim: fill(DB::CLAIM),
            claim_batch: fill(DB::CLAIM_BATCH),
            defer: fill(DB::DEFER),
            deferrals: fill(DB::DEFERRALS),
            forget_deferrals: fill(DB::FORGET_DEFERRALS),
            handlers: fill(DB::INBOX_HANDLERS),
        }
    }
}

row! {
    /// One handler's rows in an inbox as read.
    pub(crate) struct HandlerRow {
        handler: String,
        rows: i64,
        /// The oldest row's age in milliseconds.
        oldest_ms: Option<i64>,
    }
}

/// Counts one deferral of a message: handler, id, now in Unix milliseconds. Where the database
/// returns from an upsert, the row reads the deferrals so far and the first one's time.
#[allow(unreachable_pub)] // named by the sealed traits, unreachable outside the crate
pub struct Defer<'a> {
    pub(crate) handler: &'a str,
    pub(crate) id: &'a str,
    pub(crate) now_ms: i64,
}

row! {
    /// A message's deferrals as read: how many, and when the first was counted.
    #[allow(unreachable_pub)] // named by the sealed traits, unreachable outside the crate
    pub struct DeferralsRow {
        count: i64,
        /// When the first was counted, in Unix milliseconds.
        first_ms: i64,
    }
}

impl DeferralsRow {
    /// The first deferral's row, counted at `now_ms`: what a database that does not return from
    /// its upsert counted.
    pub(crate) fn first(now_ms: i64) -> Self {
        Self {
            count: 1,
            first_ms: now_ms,
        }
    }
}

impl Statement for Defer<'_> {
    type Sql = InboxSql;
    type Row = DeferralsRow;
    fn text<'s>(&self, sql: &'s InboxSql) -> &'s Arc<str> {
        &sql.defer
    }
    fn bind<'q, DB: Codec>(self, query: Bound<'q, DB>) -> Bound<'q, DB> {
        query.arg(self.handler).arg(self.id).arg(self.now_ms)
    }
}

/// Where the deferral read's text is: handler, id; reads the count and the first one's time.
pub(crate) fn deferrals(sql: &InboxSql) -> &Arc<str> {
    &sql.deferrals
}
