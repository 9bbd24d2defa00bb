//! A history's SQL: what each table knows of one id, written once from each database's fragments
//! (an age in milliseconds, a column read as text, a placeholder).

use std::sync::Arc;

use guestlist_core::TableName;

use super::statement::{Codec, row};
use super::steps::StepsStatements;

/// The per-database fragments of a history. Sealed: implemented here for the three backends only.
#[allow(unreachable_pub)] // named by the sealed traits, unreachable outside the crate
pub trait HistoryStatements: Codec {
    /// The time in column `{at}` in Unix milliseconds (`NULL` where it is `NULL`), as a 64-bit
    /// integer: times read by several statements compare, where ages would each be measured
    /// at their own statement.
    const EPOCH_MS: &'static str;
    /// Milliseconds since the time in column `{at}` (`NULL` where it is `NULL`), as a 64-bit
    /// integer.
    const AGE_MS: &'static str;
    /// Whether placeholders are numbered (`$1`) or all `?`.
    const NUMBERED: bool = true;
    /// Integer division, as in `{a} DIV {b}` (MySQL's `/` gives a decimal).
    const DIV: &'static str = "/";
    /// Now less `{secs}` seconds, in the type of a timestamp column (`seen_at`).
    const AGO: &'static str;
}

/// SQL text for one history's tables, formatted once when the [`crate::History`] is built.
#[derive(Debug)]
pub(crate) struct HistorySql {
    /// The inbox's rows of a message: handler, when (Unix ms). Binds the id.
    pub(crate) inbox: Arc<str>,
    /// The inbox's deferrals of a message: handler, deferrals, the first's Unix ms. Binds the id.
    pub(crate) deferrals: Arc<str>,
    /// The inbox's record of a message a handler dead-lettered: handler, reason, deliveries,
    /// Unix ms. Binds the id.
    pub(crate) inbox_dead: Arc<str>,
    /// The inbox's steps of a message, in order: handler, place, name, when (Unix ms: a step's
    /// journaling, the run's lease end), milliseconds the run's lease has left, the result's
    /// bytes. Binds the id.
    pub(crate) steps: Arc<str>,
    /// The outbox's row of a message: topic, ordering key, seq, slot, when committed and
    /// published (Unix ms), the relay that stamped it and its token. Binds the id.
    pub(crate) outbox: Arc<str>,
    /// The outgoing dead letters of a message: id, topic, when dead-lettered (Unix ms), reason.
    /// Binds the id.
    pub(crate) dead: Arc<str>,
    /// The stored keys that are the id or derived from it: scope, key, status, attempt, when
    /// (Unix ms), lease left (ms), body bytes. Binds the key, then two `LIKE` patterns (`!`
    /// escapes).
    pub(crate) keys: Arc<str>,
}

impl HistorySql {
    pub(crate) fn new<DB: HistoryStatements + StepsStatements>(
        inbox: &TableName,
        outbox: &TableName,
        keys: &TableName,
    ) -> Self {
        let age = |at: &str| DB::AGE_MS.replace("{at}", at);
        let epoch = |at: &str| DB::EPOCH_MS.replace("{at}", at);
        let text = |col: &str| <DB as StepsStatements>::TEXT.replace("{col}", col);
        let param = |n: usize| {
            if <DB as HistoryStatements>::NUMBERED {
                format!("${n}")
            } else {
                "?".to_owned()
            }
        };
        let (p1, p2, p3) = (param(1), param(2), param(3));
        // `n + 0 * id` reads a narrower integer column as the 64-bit integer every database
        // decodes to i64, without a cast (whose type name differs between them).
        Self {
            inbox: format!(
                "SELECT {}, {} FROM {inbox} WHERE message_id = {p1}",
                text("handler"),
                epoch("seen_at")
            )
            .into(),
            deferrals: format!(
                "SELECT {}, deferrals, first_at FROM {inbox}_deferrals WHERE message_id = {p1}",
                text("handler")
            )
            .into(),
            inbox_dead: format!(
                "SELECT {}, {}, deliveries, dead_at FROM {inbox}_dead WHERE message_id = {p1}",
                text("handler"),
                text("reason")
            )
            .into(),
            steps: format!(
                "SELECT {}, place + 0 * token, {}, lease_until, lease_until - {}, \
                 length(result) + 0 * token FROM {inbox}_steps WHERE message_id = {p1} \
                 ORDER BY handler, place",
                text("handler"),
                text("name"),
                DB::NOW_MS
            )
            .into(),
            outbox: format!(
                "SELECT {}, {}, seq, slot + 0 * id, {}, {}, {}, published_token + 0 * id \
                 FROM {outbox} WHERE message_id = {p1}",
                text("topic"),
                text("ordering_key"),
                epoch("created_at"),
                epoch("published_at"),
                text("published_by")
            )
            .into(),
            dead: format!(
                "SELECT id, {}, {}, {} FROM {outbox}_dead WHERE message_id = {p1}",
                text("topic"),
                epoch("dead_at"),
                text("reason")
            )
            .into(),
            // The lease left is the age of its end, negated.
            keys: format!(
                "SELECT {}, {}, status + 0 * attempt, attempt, {}, 0 - {}, \
                 length(body) + 0 * attempt FROM {keys} WHERE idempotency_key = {p1} \
                 OR idempotency_key LIKE {p2} ESCAPE '!' OR idempotency_key LIKE {p3} ESCAPE '!'",
                text("scope"),
                text("idempotency_key"),
                epoch("created_at"),
                age("locked_until")
            )
            .into(),
        }
    }
}

row! {
    /// An inbox's claim of a message in a history.
    pub(crate) struct ClaimTraceRow {
        handler: String,
        /// When it was claimed, in Unix milliseconds.
        at_ms: i64,
    }
}

row! {
    /// An inbox's deferrals of a message in a history.
    pub(crate) struct DeferralTraceRow {
        handler: String,
        deferrals: i64,
        /// When the first was counted, in Unix milliseconds.
        first_ms: i64,
    }
}

row! {
    /// An inbox's record of a message its handler dead-lettered, in a history.
    pub(crate) struct GaveUpTraceRow {
        handler: String,
        reason: String,
        deliveries: i64,
        /// When, in Unix milliseconds.
        at_ms: i64,
    }
}

row! {
    /// A row of an inbox's steps table in a history: the run (place 0) or a finished step.
    pub(crate) struct StepTraceRow {
        handler: String,
        place: i64,
        name: String,
        /// When the step was journaled, or when the run's lease ends, in Unix milliseconds.
        at_ms: i64,
        /// Milliseconds the run's lease has left (a step's row: since it was journaled, negated).
        left_ms: i64,
        /// The result's bytes (none for the run's row).
        result_bytes: Option<i64>,
    }
}

row! {
    /// An outbox row of a history as read.
    pub(crate) struct OutboxTraceRow {
        topic: String,
        ordering_key: Option<String>,
        seq: i64,
        slot: i64,
        /// When it was committed, in Unix milliseconds.
        created_ms: i64,
        /// When it was stamped published, in Unix milliseconds.
        published_ms: Option<i64>,
        /// The relay that stamped it, and its shard's token then.
        published_by: Option<String>,
        published_token: Option<i64>,
    }
}

row! {
    /// An outgoing dead letter of a history as read.
    pub(crate) struct DeadTraceRow {
        id: i64,
        topic: String,
        /// When it was dead-lettered, in Unix milliseconds.
        dead_ms: i64,
        reason: String,
    }
}

row! {
    /// A stored key of a history as read.
    pub(crate) struct KeyTraceRow {
        scope: String,
        key: String,
        status: Option<i64>,
        attempt: i64,
        /// When it was created, in Unix milliseconds.
        created_ms: i64,
        /// Milliseconds its lease has left (negative once expired).
        lease_left_ms: Option<i64>,
        body_bytes: Option<i64>,
    }
}
