//! What a batch's runs write for one commit of the transaction they share
//! ([`super::group`]), or one run's for its own commit: each run's guard (its row held by its
//! token, its lease renewed or ended), the step it journals, the inbox's claim of a message
//! whose final work is done, and whether its journal goes. They are written just before the
//! commit, all at once: on PostgreSQL one statement, elsewhere each run's own statements. A run
//! taken over meanwhile fails its guard, a claim that finds its message handled fails too, and
//! the transaction rolls back: nothing of it commits without its guard, and no final work
//! commits twice.

use std::sync::Arc;

use serde::Serialize;

use super::RunOf;
use crate::Error;
use crate::backend::statement::Plain;
use crate::backend::steps::{Record, StepsSql};
use crate::backend::{Backend, InboxSql};

/// One run's writes for the commit.
#[derive(Debug)]
pub(crate) struct Pending {
    /// The run.
    pub(crate) run: Arc<RunOf>,
    /// The token it holds the message by.
    pub(crate) token: i64,
    /// Its lease from the commit on, in milliseconds: 0 ends it.
    pub(crate) lease_ms: i64,
    /// The step it journals: its place, name and result.
    pub(crate) step: Option<(i64, String, Vec<u8>)>,
    /// Whether its run and journal go (its final work commits).
    pub(crate) forget: bool,
    /// Whether the inbox claims its message (its final work is on the transaction).
    pub(crate) claim: bool,
}

/// The runs whose writes must not commit, found while writing them.
#[derive(Debug, Default)]
pub(crate) struct Refused {
    /// Another run holds the message now.
    pub(crate) taken: Vec<Arc<RunOf>>,
    /// The inbox held the message already (claimed by something other than a run of steps).
    pub(crate) handled: Vec<Arc<RunOf>>,
}

impl Refused {
    /// Whether nothing was refused.
    pub(crate) fn is_empty(&self) -> bool {
        self.taken.is_empty() && self.handled.is_empty()
    }
}

/// A run's row in the JSON list PostgreSQL reads.
#[derive(Serialize)]
struct Row<'a> {
    h: &'a str,
    i: &'a str,
    t: i64,
    l: i64,
    p: i64,
    n: &'a str,
    v: Option<&'a str>,
    c: bool,
    f: bool,
}

/// Writes `pending` on `conn`, claiming in `inbox`; returns the runs whose writes must not
/// commit.
pub(crate) async fn write<DB: Backend>(
    conn: &mut DB::Connection,
    sql: &StepsSql,
    inbox: &InboxSql,
    pending: &[Pending],
) -> Result<Refused, Error> {
    if pending.is_empty() {
        return Ok(Refused::default());
    }
    if sql.journal_round.is_some() {
        write_round::<DB>(conn, sql, pending).await
    } else {
        write_each::<DB>(conn, sql, inbox, pending).await
    }
}

/// Each run's statements in turn: the guard, the journal row, the claim, the forgetting.
async fn write_each<DB: Backend>(
    conn: &mut DB::Connection,
    sql: &StepsSql,
    inbox: &InboxSql,
    pending: &[Pending],
) -> Result<Refused, Error> {
    let mut refused = Refused::default();
    for write in pending {
        let (owner, id) = write.run.columns();
        let renew = Plain::new(
            |sql: &StepsSql| &sql.renew,
            (write.lease_ms, owner, id, write.token),
        );
        if DB::run(conn, sql, renew).await? != 1 {
            refused.taken.push(Arc::clone(&write.run));
            continue;
        }
        if write.claim && !DB::claim(conn, inbox, owner, id).await? {
            refused.handled.push(Arc::clone(&write.run));
            continue;
        }
        if let Some((place, name, result)) = &write.step {
            let record = Record {
                handler: owner,
                id,
                place: *place,
                name,
                token: write.token,
                result,
            };
            DB::run(conn, sql, record).await?;
        }
        if write.forget {
            DB::run(
                conn,
                sql,
                Plain::new(|sql: &StepsSql| &sql.forget, (owner, id)),
            )
            .await?;
        }
    }
    Ok(refused)
}

/// The guards, journal rows, claims and forgetting in one statement
/// ([`StepsSql::journal_round`]).
async fn write_round<DB: Backend>(
    conn: &mut DB::Connection,
    sql: &StepsSql,
    pending: &[Pending],
) -> Result<Refused, Error> {
    let mut rows = Vec::with_capacity(pending.len());
    for write in pending {
        let (p, n, v) = match &write.step {
            Some((place, name, result)) => {
                let text = std::str::from_utf8(result).map_err(|err| Error::StepResult {
                    step: name.clone(),
                    reason: format!("is not UTF-8 JSON: {err}"),
                })?;
                (*place, name.as_str(), Some(text))
            }
            None => (0, "", None),
        };
        rows.push(Row {
            h: &write.run.owner,
            i: &write.run.id,
            t: write.token,
            l: write.lease_ms,
            p,
            n,
            v,
            c: write.claim,
            f: write.forget,
        });
    }
    let rows = json_list(&rows, "the steps' journal")?;
    let round = Plain::reading(
        |sql: &StepsSql| sql.journal_round.as_ref().expect("checked by write"),
        (rows.as_str(),),
    );
    let refusals: Vec<(String, i64)> = DB::fetch(conn, sql, round).await?;
    let refused_as = |kind: i64| -> Vec<Arc<RunOf>> {
        pending
            .iter()
            .filter(|write| {
                refusals
                    .iter()
                    .any(|(id, k)| *k == kind && *id == write.run.id)
            })
            .map(|write| Arc::clone(&write.run))
            .collect()
    };
    Ok(Refused {
        taken: refused_as(0),
        handled: refused_as(1),
    })
}

/// `rows` as the JSON list a batch's statement reads; `what` names it in the error.
pub(crate) fn json_list<T: Serialize>(rows: &[T], what: &str) -> Result<String, Error> {
    serde_json::to_string(rows).map_err(|err| Error::StepResult {
        step: what.to_owned(),
        reason: format!("cannot be written as JSON: {err}"),
    })
}
