//! The steps' SQL: a message's run row (place 0: the token of the run that holds the message, and
//! its lease's end) and its journal (places 1 and on: each finished step's name and result),
//! written once from each database's fragments. Times are Unix milliseconds on the database's
//! clock, so that every process judges a lease by the same clock.

use std::sync::Arc;

use guestlist_core::TableName;

use super::statement::{Args, Bound, Codec, Statement, row};

/// The per-database fragments of the steps' SQL. Sealed: implemented for the three backends only.
#[allow(unreachable_pub)] // named by the sealed traits, unreachable outside the crate
pub trait StepsStatements: Codec {
    /// Now on the database's clock, in Unix milliseconds, as a 64-bit integer.
    const NOW_MS: &'static str;
    /// Whether placeholders are numbered (`$1`) or all `?`.
    const NUMBERED: bool = true;
    /// What follows an insert that must do nothing where the row is there already (MySQL
    /// reports the duplicate instead, which [`super::sealed::Statements::inserted`] reads).
    const ON_CONFLICT: &'static str = " ON CONFLICT DO NOTHING";
    /// Column `{col}` read as text (MySQL keeps ids as bytes); the history reads with it too.
    const TEXT: &'static str = "{col}";
    /// One statement that renews the run's lease by its token and journals a finished step,
    /// where the database can write both at once (PostgreSQL, with a data-modifying `WITH`):
    /// an external step's journal is then one round trip, not a transaction of four. Binds as
    /// [`StepsSql::record_guarded`] says.
    const RECORD_GUARDED: Option<&'static str> = None;
    /// Claims one message's run in one statement, where the database can (PostgreSQL, with a
    /// data-modifying `WITH`): a new run row unless the inbox holds the message (`{done}`).
    /// Binds handler, id, token, lease (ms); returns whether the row was written (1) and whether
    /// the inbox held the message (1). Elsewhere the inbox is asked first, then the run claimed.
    const CLAIM_ONE: Option<&'static str> = None;
    /// One run's final commit in one statement, where the database can (PostgreSQL): the guard
    /// (the run row locked by its token), the inbox's claim (in `{claims}`), and the journal
    /// forgotten (where the fourth value is 1) or the lease ended. Binds handler, id, token,
    /// forget; returns whether the run held the message (1) and whether the claim was new (1).
    const SETTLE_ONE: Option<&'static str> = None;
    /// One statement that guards a batch's runs by their tokens (each run row locked, its lease
    /// renewed once a tenth of it has passed, or ended where the lease given is 0), journals their
    /// finished steps, claims the messages whose final work is done (in the inbox, `{claims}`)
    /// and forgets the runs whose journal goes, where the database reads a list of rows from
    /// one JSON value (PostgreSQL): what a batch's runs wrote for one commit, in one round
    /// trip. Binds the JSON list ([`crate::steps::pending`]); returns each message id whose run
    /// another holds now (0), or whose claim found it handled (1). Elsewhere each row is its
    /// own statements.
    const JOURNAL_ROUND: Option<&'static str> = None;
    /// Claims the runs of a batch's messages in one statement, where the
    /// database reads a list of rows from one JSON value (PostgreSQL): a new run row for each
    /// message that has none and is not handled (`{done}` says where handled ones are). Binds a
    /// JSON list of `{"h": handler, "i": id, "t": token, "l": lease in ms}`; returns the ids
    /// claimed (0) and those found handled (1).
    const CLAIM_ROUND: Option<&'static str> = None;
    /// Of a JSON list of `{"h": handler, "i": id}`, the ids handled (`{done}`), read after
    /// [`CLAIM_ROUND`](Self::CLAIM_ROUND) in a statement of its own: a run that committed while
    /// the claims waited for its run row is seen only by a later statement.
    const HANDLED_ROUND: Option<&'static str> = None;
}

/// Where a run's owner is found handled, so that a journal read and the list of runs mid-steps
/// can tell: the inbox's row of the message, or the key's stored answer.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Done<'a> {
    /// The table: the inbox, or the keys.
    table: &'a str,
    /// Its columns matching the journal's `handler` and `message_id`.
    owner: &'a str,
    id: &'a str,
    /// What else a row must say to count as handled.
    answered: &'a str,
    /// Whether the table is an inbox that a batch's runs claim their messages in.
    claims: bool,
}

impl<'a> Done<'a> {
    /// A message is handled once the inbox holds it.
    pub(crate) fn inbox(inbox: &'a TableName) -> Self {
        Self {
            table: inbox.as_str(),
            owner: "handler",
            id: "message_id",
            answered: "",
            claims: true,
        }
    }

    /// A request is handled once its key has an answer stored.
    pub(crate) fn keys(keys: &'a TableName) -> Self {
        Self {
            table: keys.as_str(),
            owner: "scope",
            id: "idempotency_key",
            answered: " AND status IS NOT NULL",
            claims: false,
        }
    }
}

/// SQL text for one steps table (`<inbox>_steps`, `<keys>_steps`), formatted once per inbox or
/// key store.
#[derive(Debug)]
#[allow(unreachable_pub)] // named by the sealed traits, unreachable outside the crate
pub struct StepsSql {
    /// Claims a message's run: handler, id, the run's mark (a key's request fingerprint; empty
    /// for a message), token, lease (ms); one row changed when claimed.
    pub(crate) claim: Arc<str>,
    /// Seats a new attempt of the same request as the run: token, lease (ms), handler, id,
    /// mark; one row changed when the run row bears that mark.
    pub(crate) adopt: Arc<str>,
    /// A message's run row: token, milliseconds its lease has left. Binds handler, id.
    pub(crate) run: Arc<str>,
    /// Takes an ended run over: new token, lease (ms), handler, id, the token read.
    pub(crate) take_over: Arc<str>,
    /// Renews the run's lease, by its token: lease (ms), handler, id, token. Inside a step's or
    /// the final commit's transaction, it is the guard (no row: another run holds the message)
    /// and it locks the run row, so that a take-over waits for the transaction's end.
    pub(crate) renew: Arc<str>,
    /// The journal, in order (place, name, result), and a row at place -1 where the inbox
    /// holds the message already. Binds handler, id, handler, id.
    pub(crate) journal: Arc<str>,
    /// Journals a finished step: handler, id, place, name, token, result.
    pub(crate) record: Arc<str>,
    /// Renews the run's lease and journals a finished step in one statement, where the
    /// database can ([`StepsStatements::RECORD_GUARDED`]): lease (ms), handler, id, token,
    /// place, name, result; no row written: another run holds the message.
    pub(crate) record_guarded: Option<Arc<str>>,
    /// Forgets a message's run and journal: handler, id.
    pub(crate) forget: Arc<str>,
    /// Renews runs, journals their steps, claims their finished messages and forgets their
    /// journals in one statement, where the database can ([`StepsStatements::JOURNAL_ROUND`];
    /// an inbox's only): binds a JSON list; returns the ids taken over (0) or handled already
    /// (1).
    pub(crate) journal_round: Option<Arc<str>>,
    /// Claims one message's run, where the database can in one statement
    /// ([`StepsStatements::CLAIM_ONE`]): handler, id, token, lease (ms); returns whether the row
    /// was written and whether the inbox held the message.
    pub(crate) claim_one: Option<Arc<str>>,
    /// One run's guard, inbox claim and journal's end in one statement, where the database can
    /// ([`StepsStatements::SETTLE_ONE`]; an inbox's only): handler, id, token, forget (1 or 0);
    /// returns whether the run held the message and whether the claim was new.
    pub(crate) settle_one: Option<Arc<str>>,
    /// Claims runs in one statement, where the database can
    /// ([`StepsStatements::CLAIM_ROUND`]): binds a JSON list; returns the ids claimed (0) or
    /// found handled (1).
    pub(crate) claim_round: Option<Arc<str>>,
    /// Of a batch's runs, those whose owner is handled, where the database can
    /// ([`StepsStatements::HANDLED_ROUND`]): binds a JSON list; returns their ids.
    pub(crate) handled_round: Option<Arc<str>>,
    /// Forgets the runs and journals of at most a number of messages whose run was last
    /// touched longer ago than a number of milliseconds: a message dead-lettered or given up
    /// mid-steps. Binds the milliseconds, the limit.
    pub(crate) purge_stale: Arc<str>,
    /// Counts the rows [`purge_stale`](Self::purge_stale) would forget. Binds the milliseconds.
    pub(crate) count_stale: Arc<str>,
    /// The runs of messages not handled yet, the stalled first: handler, id, milliseconds the
    /// lease has left, steps done, the last one's name. Binds the limit.
    pub(crate) mid_steps: Arc<str>,
    /// The table's name, for errors.
    pub(crate) table: TableName,
}

impl StepsSql {
    pub(crate) fn new<DB: StepsStatements>(base: &TableName, done: Done<'_>) -> Self {
        let table = format!("{}_steps", base.as_str());
        let handled = |alias: &str| {
            format!(
                "{table} {alias} WHERE {alias}.{owner} = {{owner}} AND {alias}.{id} = {{id}}{answered}",
                table = done.table,
                owner = done.owner,
                id = done.id,
                answered = done.answered,
            )
        };
        let now = DB::NOW_MS;
        let params = |text: &str, count: usize| {
            let mut text = text.replace("{table}", &table).replace("{now}", now);
            for n in 1..=count {
                let param = if DB::NUMBERED {
                    format!("${n}")
                } else {
                    "?".to_owned()
                };
                text = text.replace(&format!("{{{n}}}"), &param);
            }
            Arc::<str>::from(text)
        };
        Self {
            claim: params(
                &format!(
                    "INSERT INTO {{table}} (handler, message_id, place, name, token, lease_until) \
                     VALUES ({{1}}, {{2}}, 0, {{3}}, {{4}}, {{now}} + {{5}}){}",
                    DB::ON_CONFLICT
                ),
                5,
            ),
            adopt: params(
                "UPDATE {table} SET token = {1}, lease_until = {now} + {2} \
                 WHERE handler = {3} AND message_id = {4} AND place = 0 AND name = {5}",
                5,
            ),
            run: params(
                "SELECT token, lease_until - {now} FROM {table} \
                 WHERE handler = {1} AND message_id = {2} AND place = 0",
                2,
            ),
            take_over: params(
                "UPDATE {table} SET token = {1}, lease_until = {now} + {2} \
                 WHERE handler = {3} AND message_id = {4} AND place = 0 AND token = {5} \
                 AND lease_until <= {now}",
                5,
            ),
            renew: params(
                "UPDATE {table} SET lease_until = {now} + {1} \
                 WHERE handler = {2} AND message_id = {3} AND place = 0 AND token = {4}",
                4,
            ),
            journal: params(
                &format!(
                    "SELECT place + 0 * token, name, result FROM {{table}} \
                     WHERE handler = {{1}} AND message_id = {{2}} AND place > 0 \
                     UNION ALL SELECT -1, '', NULL FROM {done} ORDER BY 1",
                    done = handled("d")
                        .replace("{owner}", "{3}")
                        .replace("{id}", "{4}")
                ),
                4,
            ),
            record: params(
                "INSERT INTO {table} \
                 (handler, message_id, place, name, token, lease_until, result) \
                 VALUES ({1}, {2}, {3}, {4}, {5}, {now}, {6})",
                6,
            ),
            // The inner query is wrapped once more so that MySQL reads it before it deletes.
            purge_stale: params(
                "DELETE FROM {table} WHERE (handler, message_id) IN \
                 (SELECT handler, message_id FROM (SELECT handler, message_id FROM {table} \
                 WHERE place = 0 AND lease_until < {now} - {1} LIMIT {2}) stale)",
                2,
            ),
            count_stale: params(
                "SELECT COUNT(*) + 0 FROM {table} WHERE (handler, message_id) IN \
                 (SELECT handler, message_id FROM {table} \
                 WHERE place = 0 AND lease_until < {now} - {1})",
                1,
            ),
            record_guarded: DB::RECORD_GUARDED.map(|text| params(text, 7)),
            claim_one: DB::CLAIM_ONE.filter(|_| done.claims).map(|text| {
                let done = handled("d")
                    .replace("{owner}", "{1}")
                    .replace("{id}", "{2}");
                params(&text.replace("{done}", &done), 4)
            }),
            settle_one: DB::SETTLE_ONE
                .filter(|_| done.claims)
                .map(|text| params(&text.replace("{claims}", done.table), 4)),
            journal_round: DB::JOURNAL_ROUND
                .filter(|_| done.claims)
                .map(|text| params(&text.replace("{claims}", done.table), 1)),
            claim_round: DB::CLAIM_ROUND.map(|text| {
                let done = handled("d")
                    .replace("{owner}", "r.h")
                    .replace("{id}", "r.i");
                params(&text.replace("{done}", &done), 1)
            }),
            handled_round: DB::HANDLED_ROUND.map(|text| {
                let done = handled("d")
                    .replace("{owner}", "r.h")
                    .replace("{id}", "r.i");
                params(&text.replace("{done}", &done), 1)
            }),
            mid_steps: params(
                &format!(
                    "SELECT {}, {}, r.lease_until - {{now}}, \
                     (SELECT COUNT(*) FROM {{table}} j WHERE j.handler = r.handler \
                     AND j.message_id = r.message_id AND j.place > 0) + 0 * r.token, \
                     (SELECT j.name FROM {{table}} j WHERE j.handler = r.handler \
                     AND j.message_id = r.message_id AND j.place > 0 \
                     ORDER BY j.place DESC LIMIT 1) \
                     FROM {{table}} r WHERE r.place = 0 AND NOT EXISTS (SELECT 1 FROM {done}) \
                     ORDER BY r.lease_until LIMIT {{1}}",
                    DB::TEXT.replace("{col}", "r.handler"),
                    DB::TEXT.replace("{col}", "r.message_id"),
                    done = handled("i")
                        .replace("{owner}", "r.handler")
                        .replace("{id}", "r.message_id"),
                ),
                1,
            ),
            table: TableName::new(&table).unwrap_or_else(|_| base.clone()),
            forget: params(
                "DELETE FROM {table} WHERE handler = {1} AND message_id = {2}",
                2,
            ),
        }
    }
}

row! {
    /// A message's run row as read.
    pub(crate) struct RunRow {
        token: i64,
        /// Milliseconds its lease has left (zero or less once it ended).
        lease_left_ms: i64,
    }
}

row! {
    /// A message's run in the list of those mid-steps.
    pub(crate) struct MidStepsRow {
        handler: String,
        message_id: String,
        lease_left_ms: i64,
        steps_done: i64,
        last_step: Option<String>,
    }
}

row! {
    /// A finished step as journaled (at place -1: the inbox holds the message).
    pub(crate) struct JournalRow {
        place: i64,
        name: String,
        result: Option<Vec<u8>>,
    }
}

/// Journals a finished step: its place, name, the run's token and its result.
pub(crate) struct Record<'a> {
    pub(crate) handler: &'a str,
    pub(crate) id: &'a str,
    pub(crate) place: i64,
    pub(crate) name: &'a str,
    pub(crate) token: i64,
    pub(crate) result: &'a [u8],
}

/// Renews the run's lease and journals a finished step, in one statement.
pub(crate) struct GuardedRecord<'a> {
    pub(crate) lease_ms: i64,
    pub(crate) record: Record<'a>,
}

impl Statement for GuardedRecord<'_> {
    type Sql = StepsSql;
    type Row = ();
    fn text<'s>(&self, sql: &'s StepsSql) -> &'s Arc<str> {
        sql.record_guarded
            .as_ref()
            .expect("a guarded record only where the database writes one")
    }
    fn bind<'q, DB: Codec>(self, query: Bound<'q, DB>) -> Bound<'q, DB> {
        let Record {
            handler,
            id,
            place,
            name,
            token,
            result,
        } = self.record;
        query
            .arg(self.lease_ms)
            .arg(handler)
            .arg(id)
            .arg(token)
            .arg(place)
            .arg(name)
            .arg(result)
    }
}

impl Statement for Record<'_> {
    type Sql = StepsSql;
    type Row = ();
    fn text<'s>(&self, sql: &'s StepsSql) -> &'s Arc<str> {
        &sql.record
    }
    fn bind<'q, DB: Codec>(self, query: Bound<'q, DB>) -> Bound<'q, DB> {
        query
            .arg(self.handler)
            .arg(self.id)
            .arg(self.place)
            .arg(self.name)
            .arg(self.token)
            .arg(self.result)
    }
}
