//! Runs claimed (DESIGN 4d): one message's on its own (its run claimed under the lease's
//! protocol, then its journal read), and a batch's at once, where the database reads a list of
//! rows from one JSON value (PostgreSQL): the run rows of the new messages go in one statement,
//! which also finds those handled before, and one more reads which of them were handled
//! meanwhile, instead of three or four statements a message.

use std::collections::{HashMap, HashSet};

use guestlist_core::{HandlerName, MessageId};
use serde::Serialize;
use sqlx::Pool;

use crate::Error;
use crate::backend::Backend;
use crate::backend::statement::Plain;
use crate::backend::steps::StepsSql;
use crate::fencing::new_token;
use crate::inbox::Inbox;
use crate::steps::pending::json_list;
use crate::steps::{Run, RunOf, claim_run, read_journal};

/// How a run's claim on its own ended.
pub(super) enum Claimed {
    /// This run holds the message; its journal so far.
    Holds(i64, Vec<crate::backend::steps::JournalRow>),
    /// Another run holds it, for this long yet.
    Held(std::time::Duration),
    /// The inbox holds the message already.
    Handled,
}

/// What the claims found of a message.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum RoundClaim {
    /// A new run row holds it under this token: nothing journaled yet.
    Fresh(i64),
    /// The inbox held it by the time the claims were read back: the run row just written
    /// under this token is to be settled, and the message is a duplicate.
    HandledMeanwhile(i64),
    /// The inbox held it already: no run row was written; a duplicate.
    Handled,
}

/// A run to claim, in the JSON list the statements read.
#[derive(Serialize)]
struct Row<'a> {
    h: &'a str,
    i: &'a str,
    t: i64,
    l: i64,
}

/// What the claims' statements returned, by message id.
struct Found {
    /// The runs claimed.
    claimed: HashSet<String>,
    /// The messages found handled before: no run row.
    handled: HashSet<String>,
    /// Of those claimed, the ones handled meanwhile.
    meanwhile: HashSet<String>,
}

impl<DB: Backend> Inbox<DB> {
    /// Claims the runs of a batch's new messages at once, where the database can: what was
    /// found of each, by message id. A message not found here (another run holds it, a message
    /// twice in the batch, or the database claims one at a time) is claimed on its own by its
    /// run, which meets there any error these claims met.
    pub(super) async fn claim_round(
        &self,
        pool: &Pool<DB>,
        handler: &HandlerName,
        ids: &[&MessageId],
    ) -> HashMap<String, RoundClaim> {
        if self.steps.claim_round.is_none() || self.steps.handled_round.is_none() {
            return HashMap::new();
        }
        let lease_ms = self.step_lease_ms();
        let mut rows = Vec::with_capacity(ids.len());
        let mut seen = HashSet::with_capacity(ids.len());
        for id in ids {
            if !seen.insert(id.as_str()) {
                continue;
            }
            let Ok(token) = new_token() else {
                return HashMap::new();
            };
            rows.push(Row {
                h: handler.as_str(),
                i: id.as_str(),
                t: token as i64,
                l: lease_ms,
            });
        }
        match self.write_claims(pool, &rows).await {
            Ok(found) => rows
                .iter()
                .filter_map(|row| {
                    let claim = if found.handled.contains(row.i) {
                        RoundClaim::Handled
                    } else if !found.claimed.contains(row.i) {
                        return None;
                    } else if found.meanwhile.contains(row.i) {
                        RoundClaim::HandledMeanwhile(row.t)
                    } else {
                        RoundClaim::Fresh(row.t)
                    };
                    Some((row.i.to_owned(), claim))
                })
                .collect(),
            Err(err) => {
                tracing::debug!(error = %err, "cannot claim a batch's runs at once");
                HashMap::new()
            }
        }
    }

    /// Writes the claims of `rows`; returns what they found.
    async fn write_claims(&self, pool: &Pool<DB>, rows: &[Row<'_>]) -> Result<Found, Error> {
        let json = json_list(rows, "the batch's claims")?;
        let mut conn = pool.acquire().await?;
        let claim = Plain::reading(
            |sql: &StepsSql| sql.claim_round.as_ref().expect("checked by claim_round"),
            (json.as_str(),),
        );
        let found: Vec<(String, i64)> = DB::fetch(&mut conn, &*self.steps, claim).await?;
        let of_kind = |kind: i64| -> HashSet<String> {
            found
                .iter()
                .filter(|(_, k)| *k == kind)
                .map(|(id, _)| id.clone())
                .collect()
        };
        let mut found = Found {
            claimed: of_kind(0),
            handled: of_kind(1),
            meanwhile: HashSet::new(),
        };
        if found.claimed.is_empty() {
            return Ok(found);
        }
        // A statement of its own, so that it sees a run that committed (and forgot its run row)
        // while the claims waited on that row: the claim then wrote a new one.
        let meanwhile = Plain::reading(
            |sql: &StepsSql| sql.handled_round.as_ref().expect("checked by claim_round"),
            (json.as_str(),),
        );
        let meanwhile: Vec<(String,)> = DB::fetch(&mut conn, &*self.steps, meanwhile).await?;
        found.meanwhile = meanwhile.into_iter().map(|(id,)| id).collect();
        Ok(found)
    }

    /// Claims `of`'s run on its own on `conn` (a batch's transaction, or a connection of the
    /// pool's) and reads its journal.
    pub(super) async fn claim_in(
        &self,
        conn: &mut DB::Connection,
        of: &RunOf,
        lease_ms: i64,
    ) -> Result<Claimed, Error> {
        let token = match claim_run::<DB>(conn, &self.steps, of, lease_ms).await? {
            Run::Holds(token) => token,
            Run::Held(retry_after) => return Ok(Claimed::Held(retry_after)),
        };
        self.journal_of(conn, of, token).await
    }

    /// The journal of the run of `of` just claimed under `token`, read in a statement of its
    /// own after the claim, which asks the inbox again: a run that committed (and forgot its
    /// run row) while the claim waited on that row is seen only by a later statement. Where the
    /// message turns out handled, the run row just claimed is settled.
    pub(super) async fn journal_of(
        &self,
        conn: &mut DB::Connection,
        of: &RunOf,
        token: i64,
    ) -> Result<Claimed, Error> {
        match read_journal::<DB>(conn, &self.steps, of).await? {
            Some(journal) => Ok(Claimed::Holds(token, journal)),
            None => {
                self.settle_journal(conn, of, token).await?;
                Ok(Claimed::Handled)
            }
        }
    }
}
