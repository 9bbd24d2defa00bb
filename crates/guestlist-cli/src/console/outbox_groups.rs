//! Outgoing dead letters taken by failure group from the page: back in the outbox or dropped,
//! once a page of its own has named the group's count and the operator confirmed it.

use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use guestlist::outbox::OutgoingGroup;
use guestlist::{Backend, Outbox};

use super::Shared;
use super::actions::{Authorized, failed, refused};
use super::done::{Done, Group};
use super::inbox_actions::{Action, GroupForm};
use super::incoming::{Asked, confirm};
use super::snapshot::GROUPED;
use crate::database::with_pool;

/// `POST /outbox/group/{group}/retry` and `…/drop`: a whole failure group of outgoing dead
/// letters, once its count is confirmed as it is now; without a confirmation (or with another
/// count), the page that asks.
pub(crate) async fn group(
    State(console): Shared,
    Path((name, action)): Path<(String, String)>,
    form: Authorized<GroupForm>,
) -> Response {
    let Some(act_on) = Action::of(&action) else {
        return refused(StatusCode::NOT_FOUND, "a group can be retried or dropped");
    };
    let table = console.tables.outbox.clone();
    let done = with_pool!(console.pool.clone(), |pool| {
        act(&pool, table, &name, act_on, form.form.confirm).await
    });
    match done {
        Ok(Acted::Asked(group)) => {
            let asked = Asked {
                path: format!("/outbox/group/{}/{action}", group.id),
                id: &group.id,
                owner: &group.topic,
                class: &group.class,
                count: group.count(),
            };
            confirm(&form.form.csrf, &asked, &action).into_response()
        }
        Ok(Acted::Missing) => refused(
            StatusCode::NOT_FOUND,
            &format!("no failure group {name} among the dead letters: reload the console"),
        ),
        Ok(Acted::Done(changed)) => {
            tracing::info!(group = %changed.group, done = changed.done, of = changed.of,
                %action, "console: outgoing dead-letter group");
            form.back(&match act_on {
                Action::Retry => Done::OutboxGroupRetried(changed),
                Action::Drop => Done::OutboxGroupDropped(changed),
            })
        }
        Err(err) => failed(&err),
    }
}

/// What the group action did.
enum Acted {
    /// The count was not confirmed as it is now: ask, with this group.
    Asked(OutgoingGroup),
    /// No such group.
    Missing,
    /// Done: how many of how many.
    Done(Group),
}

async fn act<DB: Backend>(
    pool: &guestlist::sqlx::Pool<DB>,
    table: guestlist::TableName,
    name: &str,
    action: Action,
    confirmed: Option<usize>,
) -> anyhow::Result<Acted> {
    let outbox = Outbox::<DB>::in_table(table);
    let groups = outbox.dead_groups(pool, GROUPED).await?;
    let Some(group) = groups.into_iter().find(|g| g.id == name) else {
        return Ok(Acted::Missing);
    };
    if confirmed != Some(group.count()) {
        return Ok(Acted::Asked(group));
    }
    let mut done = 0;
    for id in &group.ids {
        let changed = match action {
            Action::Retry => outbox.retry_dead(pool, *id).await?,
            Action::Drop => outbox.drop_dead(pool, *id).await?,
        };
        done += usize::from(changed);
    }
    Ok(Acted::Done(Group {
        group: group.id.clone(),
        done,
        of: group.count(),
    }))
}
