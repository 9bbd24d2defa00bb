//! The messages mid-steps, as an operator lists them: each run not finished yet, with the
//! steps it has done and whether its lease still holds.

use std::time::Duration;

use crate::backend::Backend;
use crate::backend::statement::Plain;
use crate::backend::steps::{MidStepsRow, StepsSql};
use crate::{Error, Inbox};

/// A message whose steps are not finished: a run works on it (its lease holds), or a run died,
/// stalled or gave up on it (dead-lettered, say) and the next delivery resumes after the steps
/// done.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MidSteps {
    /// The handler.
    pub handler: String,
    /// The message's id.
    pub message_id: String,
    /// How many of its steps are done (journaled).
    pub steps_done: u32,
    /// The last step done, if any: the next delivery resumes after it.
    pub last_step: Option<String>,
    /// How long its run's lease still holds; `None` once it ended.
    pub lease_left: Option<Duration>,
    /// How long ago its run's lease ended; `None` while it holds.
    pub stalled_for: Option<Duration>,
}

impl<DB: Backend> Inbox<DB> {
    /// The messages mid-steps (runs of [`Inbox::process_steps`] whose message is not handled
    /// yet), the longest stalled first, up to `limit`: what `guestlist console` lists.
    pub async fn mid_steps(
        &self,
        pool: &sqlx::Pool<DB>,
        limit: u32,
    ) -> Result<Vec<MidSteps>, Error> {
        let mut conn = pool.acquire().await?;
        let list = Plain::reading(|sql: &StepsSql| &sql.mid_steps, (i64::from(limit),));
        let rows: Vec<MidStepsRow> = DB::fetch(&mut conn, &*self.steps, list)
            .await
            .map_err(|err| Error::from_store::<DB>(&self.steps.table, err))?;
        Ok(rows
            .into_iter()
            .map(|row| {
                let left = Duration::from_millis(row.lease_left_ms.unsigned_abs());
                let holds = row.lease_left_ms > 0;
                MidSteps {
                    handler: row.handler,
                    message_id: row.message_id,
                    steps_done: u32::try_from(row.steps_done).unwrap_or(u32::MAX),
                    last_step: row.last_step,
                    lease_left: holds.then_some(left),
                    stalled_for: (!holds).then_some(left),
                }
            })
            .collect())
    }
}
