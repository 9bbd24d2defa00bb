//! The outbox's SQL: its text, formatted once per table, and the row an insert binds.

use std::sync::Arc;

use guestlist_core::TableName;

use super::statement::{Args, Bound, Codec, Statement};
use super::table::{Rows, filler};
use super::{TableSql, sealed};

/// SQL text for one outbox table, formatted once when the [`crate::Outbox`] is built.
#[derive(Debug)]
#[allow(unreachable_pub)] // named by the sealed traits, unreachable outside the crate
pub struct OutboxSql {
    pub(crate) common: Arc<TableSql>,
    /// Takes an ordering key's next seq and locks its row until the transaction ends: key.
    pub(crate) next_seq: Arc<str>,
    /// Reads the seq [`OutboxSql::next_seq`] just took, where the upsert returns nothing
    /// (MySQL): key. Empty elsewhere.
    #[cfg_attr(not(feature = "mysql"), allow(dead_code))]
    pub(crate) read_seq: Arc<str>,
    /// Inserts a message unless its id is there: id, topic, ordering key, seq, headers,
    /// payload, slot; 1 row when new.
    pub(crate) insert: Arc<str>,
    /// Takes back the seq [`OutboxSql::next_seq`] took for a message that was there already:
    /// key, seq.
    pub(crate) give_back_seq: Arc<str>,
}

impl OutboxSql {
    pub(crate) fn new<DB: sealed::OutboxStatements>(table: &TableName) -> Self {
        let fill = filler(table);
        Self {
            common: Arc::new(TableSql::new::<DB>(
                table,
                "published_at",
                Rows::Appended,
                DB::OUTBOX_DDL,
                "guestlist_outbox",
            )),
            next_seq: fill(DB::OUTBOX_NEXT_SEQ),
            read_seq: fill(DB::OUTBOX_READ_SEQ),
            insert: fill(DB::OUTBOX_INSERT),
            give_back_seq: fill(DB::OUTBOX_GIVE_BACK_SEQ),
        }
    }
}

/// One outgoing message's row, as [`sealed::OutboxStatements::outbox_insert`] binds it.
#[derive(Debug, Clone, Copy)]
#[allow(unreachable_pub)] // named by the sealed traits, unreachable outside the crate
pub struct OutboxRow<'a> {
    pub(crate) message_id: &'a str,
    pub(crate) topic: &'a str,
    pub(crate) ordering_key: Option<&'a str>,
    pub(crate) seq: i64,
    pub(crate) headers: Option<&'a [u8]>,
    pub(crate) payload: &'a [u8],
    /// Which shard publishes it, whatever the shard count: see `protocol::slot`.
    pub(crate) slot: u16,
}

impl Statement for OutboxRow<'_> {
    type Sql = OutboxSql;
    type Row = ();
    fn text<'s>(&self, sql: &'s OutboxSql) -> &'s Arc<str> {
        &sql.insert
    }
    fn bind<'q, DB: Codec>(self, query: Bound<'q, DB>) -> Bound<'q, DB> {
        let query = query
            .arg(self.message_id)
            .arg(self.topic)
            .arg(self.ordering_key);
        let query = query.arg(self.seq).arg(self.headers).arg(self.payload);
        query.arg(i32::from(self.slot))
    }
}

/// Where the seq's give-back is: key, seq.
pub(crate) fn give_back_seq(sql: &OutboxSql) -> &Arc<str> {
    &sql.give_back_seq
}

/// Where the seq upsert's text is: key.
pub(crate) fn next_seq(sql: &OutboxSql) -> &Arc<str> {
    &sql.next_seq
}
