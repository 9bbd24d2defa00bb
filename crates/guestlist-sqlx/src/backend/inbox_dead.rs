//! The incoming dead letters' SQL (`<inbox>_dead`): recorded with a copy of the message,
//! listed, read whole, retried (marked, then confirmed), dropped, counted and purged; written
//! once from each database's fragments.

use std::sync::Arc;

use guestlist_core::TableName;

use super::sealed;
use super::statement::{Args, Bound, Codec, Statement, row};
use super::steps::StepsStatements;
use super::table::filler;

/// The bytes of a body shown before a retry, read with each listed dead letter.
pub(crate) const PREVIEW_BYTES: i64 = 256;

/// SQL text for one inbox's dead letters, formatted once when the [`crate::Inbox`] is built.
#[derive(Debug)]
pub(crate) struct DeadSql {
    /// Records a dead letter with its copy: handler, id, reason, deliveries, Unix ms, topic,
    /// key, headers, body; a message dead-lettered again replaces its row and is dead again.
    pub(crate) record: Arc<str>,
    /// The newest first, [`DeadRow`]s: how many at most.
    pub(crate) list: Arc<str>,
    /// One, whole ([`DeadRow`], headers, body): handler, id.
    pub(crate) one: Arc<str>,
    /// Marks a dead one as being retried: Unix ms, by whom, handler, id.
    pub(crate) begin_retry: Arc<str>,
    /// Marks a retry confirmed: handler, id, the retry's number.
    pub(crate) end_retry: Arc<str>,
    /// Drops one: handler, id.
    pub(crate) drop: Arc<str>,
    /// How many are not retried (dead, or being retried).
    pub(crate) count: Arc<str>,
    /// Deletes those dead-lettered before a Unix ms, but those being retried.
    pub(crate) purge: Arc<str>,
}

impl DeadSql {
    pub(crate) fn new<DB: sealed::Statements + StepsStatements>(table: &TableName) -> Self {
        let fill = filler(table);
        let text = |col: &str| DB::TEXT.replace("{col}", col);
        let param = |n: usize| {
            if DB::NUMBERED {
                format!("${n}")
            } else {
                "?".to_owned()
            }
        };
        let (p1, p2, p3, p4) = (param(1), param(2), param(3), param(4));
        // `n + 0 * dead_at` reads a narrower integer as the 64-bit one every database decodes
        // to i64, without a cast (whose type name differs between them).
        let columns = format!(
            "{}, {}, reason, deliveries, dead_at, topic, msg_key, state, retries, retried_at, \
             retried_by, COALESCE(LENGTH(body), -1) + 0 * dead_at, \
             SUBSTR(body, 1, {PREVIEW_BYTES})",
            text("handler"),
            text("message_id"),
        );
        Self {
            record: fill(DB::RECORD_DEAD),
            list: fill(&format!(
                "SELECT {columns} FROM {{table}}_dead ORDER BY dead_at DESC, message_id LIMIT {p1}"
            )),
            one: fill(&format!(
                "SELECT {columns}, headers, body FROM {{table}}_dead \
                 WHERE handler = {p1} AND message_id = {p2}"
            )),
            begin_retry: fill(&format!(
                "UPDATE {{table}}_dead SET state = 'retrying', retries = retries + 1, \
                 retried_at = {p1}, retried_by = {p2} \
                 WHERE handler = {p3} AND message_id = {p4} AND state = 'dead' \
                 AND body IS NOT NULL AND topic IS NOT NULL"
            )),
            end_retry: fill(&format!(
                "UPDATE {{table}}_dead SET state = 'retried' WHERE handler = {p1} \
                 AND message_id = {p2} AND state = 'retrying' AND retries = {p3}"
            )),
            drop: fill(&format!(
                "DELETE FROM {{table}}_dead WHERE handler = {p1} AND message_id = {p2}"
            )),
            count: fill("SELECT COUNT(*) + 0 FROM {table}_dead WHERE state <> 'retried'"),
            purge: fill(&format!(
                "DELETE FROM {{table}}_dead WHERE dead_at < {p1} AND state <> 'retrying'"
            )),
        }
    }
}

row! {
    /// An incoming dead letter as listed.
    pub(crate) struct DeadRow {
        handler: String,
        message_id: String,
        reason: String,
        deliveries: i64,
        /// When it was dead-lettered, in Unix milliseconds.
        at_ms: i64,
        topic: Option<String>,
        key: Option<String>,
        state: String,
        retries: i64,
        retried_ms: Option<i64>,
        retried_by: Option<String>,
        /// The kept body's bytes; -1 where none was kept.
        body_bytes: i64,
        preview: Option<Vec<u8>>,
    }
}

row! {
    /// An incoming dead letter read whole.
    pub(crate) struct DeadWholeRow {
        handler: String,
        message_id: String,
        reason: String,
        deliveries: i64,
        at_ms: i64,
        topic: Option<String>,
        key: Option<String>,
        state: String,
        retries: i64,
        retried_ms: Option<i64>,
        retried_by: Option<String>,
        body_bytes: i64,
        preview: Option<Vec<u8>>,
        headers: Option<Vec<u8>>,
        body: Option<Vec<u8>>,
    }
}

/// Records a dead letter with its copy (see [`DeadSql::record`]).
pub(crate) struct RecordDead<'a> {
    pub(crate) handler: &'a str,
    pub(crate) id: &'a str,
    pub(crate) reason: &'a str,
    pub(crate) deliveries: i64,
    pub(crate) at_ms: i64,
    pub(crate) topic: Option<&'a str>,
    pub(crate) key: Option<&'a str>,
    pub(crate) headers: Option<&'a [u8]>,
    pub(crate) body: Option<&'a [u8]>,
}

impl Statement for RecordDead<'_> {
    type Sql = DeadSql;
    type Row = ();
    fn text<'s>(&self, sql: &'s DeadSql) -> &'s Arc<str> {
        &sql.record
    }
    fn bind<'q, DB: Codec>(self, query: Bound<'q, DB>) -> Bound<'q, DB> {
        query
            .arg(self.handler)
            .arg(self.id)
            .arg(self.reason)
            .arg(self.deliveries)
            .arg(self.at_ms)
            .arg(self.topic)
            .arg(self.key)
            .arg(self.headers)
            .arg(self.body)
    }
}
