//! A batch's runs claimed at once (DESIGN 4d): where the database reads a list of rows from
//! one JSON value (PostgreSQL), the run rows of a batch's new messages go in one statement, and
//! one more reads which of them were handled meanwhile, instead of two statements a message.

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

/// A run the batch's claims took.
#[derive(Debug, Clone, Copy)]
pub(super) struct RoundClaim {
    /// Its token.
    pub(super) token: i64,
    /// The inbox held the message by the time the claims were read back: the run row just
    /// written is to be settled, and the message is a duplicate.
    pub(super) handled: bool,
}

/// A run to claim, in the JSON list the statements read.
#[derive(Serialize)]
struct Row<'a> {
    h: &'a str,
    i: &'a str,
    t: i64,
    l: i64,
}

impl<DB: Backend> Inbox<DB> {
    /// Claims the runs of a batch's new messages at once, where the database can: each run
    /// claimed, by message id. A message not claimed here (another run holds it, it was handled
    /// before, a message twice in the batch, or the database claims one at a time) is claimed
    /// on its own by its run, which meets there any error the batch's claims met.
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
            Ok((claimed, handled)) => rows
                .iter()
                .filter(|row| claimed.contains(row.i))
                .map(|row| {
                    let claim = RoundClaim {
                        token: row.t,
                        handled: handled.contains(row.i),
                    };
                    (row.i.to_owned(), claim)
                })
                .collect(),
            Err(err) => {
                tracing::debug!(error = %err, "cannot claim a batch's runs at once");
                HashMap::new()
            }
        }
    }

    /// Writes the claims of `rows`; returns the ids claimed and, of those, the ones handled.
    async fn write_claims(
        &self,
        pool: &Pool<DB>,
        rows: &[Row<'_>],
    ) -> Result<(HashSet<String>, HashSet<String>), Error> {
        let json = json_list(rows, "the batch's claims")?;
        let mut conn = pool.acquire().await?;
        let claim = Plain::reading(
            |sql: &StepsSql| sql.claim_round.as_ref().expect("checked by claim_round"),
            (json.as_str(),),
        );
        let claimed: Vec<(String,)> = DB::fetch(&mut conn, &*self.steps, claim).await?;
        if claimed.is_empty() {
            return Ok((HashSet::new(), HashSet::new()));
        }
        // A statement of its own, so that it sees a run that committed (and forgot its run row)
        // while the claims waited on that row: the claim then wrote a new one.
        let handled = Plain::reading(
            |sql: &StepsSql| sql.handled_round.as_ref().expect("checked by claim_round"),
            (json.as_str(),),
        );
        let handled: Vec<(String,)> = DB::fetch(&mut conn, &*self.steps, handled).await?;
        Ok((
            claimed.into_iter().map(|(id,)| id).collect(),
            handled.into_iter().map(|(id,)| id).collect(),
        ))
    }
}
