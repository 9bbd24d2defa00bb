//! What an operator does to incoming dead letters from the page: retry or drop one, or a whole
//! failure group once a page of its own has named the group's count and the operator
//! confirmed it. A retry goes through the broker the console was started with, recorded as
//! the browser session's (`console-…`, never the session's id).

use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use guestlist::inbox::{DeadGroup, DeadRetry};
use guestlist::{Backend, Inbox, outbox::Publish};

use super::actions::{Authorized, Csrf, failed, refused};
use super::done::{Done, Group, Letter};
use super::incoming::confirm;
use super::snapshot::GROUPED;
use super::{Console, Shared};
use crate::broker::with_publisher;
use crate::database::with_pool;

/// The form of an action on one incoming dead letter.
#[derive(Debug, serde::Deserialize)]
pub(crate) struct LetterForm {
    #[serde(default)]
    csrf: String,
    #[serde(default)]
    handler: String,
    #[serde(default)]
    message: String,
}

/// The form of an action on a failure group: the count the operator confirmed, once asked.
#[derive(Debug, serde::Deserialize)]
pub(crate) struct GroupForm {
    #[serde(default)]
    pub(crate) csrf: String,
    pub(crate) confirm: Option<usize>,
}

impl Csrf for LetterForm {
    fn csrf(&self) -> Option<&str> {
        Some(&self.csrf)
    }
}

impl Csrf for GroupForm {
    fn csrf(&self) -> Option<&str> {
        Some(&self.csrf)
    }
}

/// Retry or drop, as the address says.
#[derive(Clone, Copy, PartialEq, Eq)]
pub(crate) enum Action {
    Retry,
    Drop,
}

impl Action {
    pub(crate) fn of(word: &str) -> Option<Self> {
        match word {
            "retry" => Some(Self::Retry),
            "drop" => Some(Self::Drop),
            _ => None,
        }
    }
}

/// `POST /inbox/dead/retry` and `POST /inbox/dead/drop`: one incoming dead letter.
pub(crate) async fn letter(
    State(console): Shared,
    Path(action): Path<String>,
    form: Authorized<LetterForm>,
) -> Response {
    let Some(action) = Action::of(&action) else {
        return refused(
            StatusCode::NOT_FOUND,
            "a dead letter can be retried or dropped",
        );
    };
    if action == Action::Retry && !console.broker.given() {
        return form.back(&Done::NoBroker);
    }
    let by = by(&form);
    let picked = [(form.form.handler.clone(), form.form.message.clone())];
    match act(&console, action, &picked, &by).await {
        Ok(outcomes) => {
            let letter = Letter {
                handler: form.form.handler.clone(),
                message: form.form.message.clone(),
            };
            tracing::info!(handler = %letter.handler, id = %letter.message, %by,
                action = if action == Action::Retry { "retried" } else { "dropped" },
                "console: incoming dead letter");
            form.back(&match (action, outcomes.first()) {
                (Action::Drop, Some(Outcome::Done)) => Done::InboxDropped(letter),
                (Action::Retry, Some(Outcome::Done)) => Done::InboxRetried(letter),
                (_, Some(Outcome::Already)) => Done::InboxAlready(letter),
                (_, Some(Outcome::NoCopy)) => Done::InboxNoCopy(letter),
                (_, _) => Done::NoInboxDead(letter),
            })
        }
        Err(err) => failed(&err),
    }
}

/// `POST /inbox/group/{group}/retry` and `…/drop`: a whole failure group, once its count is
/// confirmed as it is now; without a confirmation (or with another count), the page that asks.
pub(crate) async fn group(
    State(console): Shared,
    Path((name, action)): Path<(String, String)>,
    form: Authorized<GroupForm>,
) -> Response {
    let Some(act_on) = Action::of(&action) else {
        return refused(StatusCode::NOT_FOUND, "a group can be retried or dropped");
    };
    if act_on == Action::Retry && !console.broker.given() {
        return form.back(&Done::NoBroker);
    }
    let tables = console.tables.clone();
    let groups = with_pool!(console.pool.clone(), |pool| groups(&pool, &tables).await);
    let groups = match groups {
        Ok(groups) => groups,
        Err(err) => return failed(&err),
    };
    let Some(group) = groups.into_iter().find(|g| g.id == name) else {
        return refused(
            StatusCode::NOT_FOUND,
            &format!("no failure group {name} among the dead letters waiting: reload the console"),
        );
    };
    if form.form.confirm != Some(group.count()) {
        let asked = super::incoming::Asked::incoming(&group, &action);
        return confirm(&form.form.csrf, &asked, &action).into_response();
    }
    let picked: Vec<(String, String)> = group
        .message_ids
        .iter()
        .map(|id| (group.handler.clone(), id.clone()))
        .collect();
    let by = by(&form);
    match act(&console, act_on, &picked, &by).await {
        Ok(outcomes) => {
            let done = outcomes
                .iter()
                .filter(|o| matches!(o, Outcome::Done))
                .count();
            tracing::info!(group = %group.id, handler = %group.handler, done, of = picked.len(),
                %by, %action, "console: incoming dead-letter group");
            let changed = Group {
                group: group.id.clone(),
                done,
                of: picked.len(),
            };
            form.back(&match act_on {
                Action::Retry => Done::GroupRetried(changed),
                Action::Drop => Done::GroupDropped(changed),
            })
        }
        Err(err) => failed(&err),
    }
}

/// Who acts: the browser's session, by a name that does not lead back to it.
fn by<F>(form: &Authorized<F>) -> String {
    form.session()
        .map_or_else(|| "console".to_owned(), super::session::Session::label)
}

/// What an action did to one letter.
enum Outcome {
    Done,
    Already,
    NoCopy,
    Missing,
}

async fn groups<DB: Backend>(
    pool: &guestlist::sqlx::Pool<DB>,
    tables: &super::Tables,
) -> anyhow::Result<Vec<DeadGroup>> {
    let inbox = Inbox::<DB>::in_table(tables.inbox.clone());
    Ok(inbox.dead_groups(pool, GROUPED).await?)
}

/// Retries (through the console's broker) or drops each of `picked`.
async fn act(
    console: &Console,
    action: Action,
    picked: &[(String, String)],
    by: &str,
) -> anyhow::Result<Vec<Outcome>> {
    let table = console.tables.inbox.clone();
    let pool = console.pool.clone();
    if action == Action::Drop {
        return with_pool!(pool, |pool| drop_all(&pool, table, picked).await);
    }
    let broker = console.broker.broker("")?;
    with_publisher!(broker, |publisher| {
        with_pool!(pool, |pool| retry_all(&pool, table, &publisher, picked, by).await)
    }, unused: pool, table, by)
}

async fn drop_all<DB: Backend>(
    pool: &guestlist::sqlx::Pool<DB>,
    table: guestlist::TableName,
    picked: &[(String, String)],
) -> anyhow::Result<Vec<Outcome>> {
    let inbox = Inbox::<DB>::in_table(table);
    let mut outcomes = Vec::with_capacity(picked.len());
    for (handler, id) in picked {
        outcomes.push(match inbox.drop_dead(pool, handler, id).await? {
            true => Outcome::Done,
            false => Outcome::Missing,
        });
    }
    Ok(outcomes)
}

#[cfg_attr(
    not(any(feature = "nats", feature = "amqp", feature = "kafka", feature = "sqs")),
    allow(dead_code)
)]
async fn retry_all<DB: Backend, P: Publish>(
    pool: &guestlist::sqlx::Pool<DB>,
    table: guestlist::TableName,
    publisher: &P,
    picked: &[(String, String)],
    by: &str,
) -> anyhow::Result<Vec<Outcome>> {
    let inbox = Inbox::<DB>::in_table(table);
    let mut outcomes = Vec::with_capacity(picked.len());
    for (handler, id) in picked {
        outcomes.push(
            match inbox.retry_dead(pool, publisher, handler, id, by).await? {
                DeadRetry::Retried { .. } => Outcome::Done,
                DeadRetry::AlreadyRetried => Outcome::Already,
                DeadRetry::NoCopy => Outcome::NoCopy,
                _ => Outcome::Missing,
            },
        );
    }
    Ok(outcomes)
}
