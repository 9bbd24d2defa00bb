//! Edit and retry an outgoing dead letter from the page: its body (as text) and its headers
//! (a `name: value` line each) shown in a form to a signed-in operator, and sent back to the
//! outbox changed, marked `guestlist-edited-by` with the session's label.

use axum::extract::{Path, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use guestlist::{Backend, Outbox, outbox::DeadEdit};
use maud::{DOCTYPE, Markup, PreEscaped, html};

use super::actions::{Authorized, Csrf, failed, refused};
use super::done::Done;
use super::forms::csrf_field;
use super::page::STYLE;
use super::{Console, Shared};
use crate::database::with_pool;

/// The edit form as sent.
#[derive(Debug, serde::Deserialize)]
pub(crate) struct EditForm {
    #[serde(default)]
    csrf: String,
    #[serde(default)]
    body: String,
    #[serde(default)]
    headers: String,
}

impl Csrf for EditForm {
    fn csrf(&self) -> Option<&str> {
        Some(&self.csrf)
    }
}

/// `GET /dead/{id}/edit`: the form, to a signed-in operator.
pub(crate) async fn page(
    State(console): Shared,
    Path(id): Path<i64>,
    headers: HeaderMap,
) -> Response {
    let Some(csrf) = console.csrf(&headers) else {
        return refused(
            StatusCode::FORBIDDEN,
            "sign in first: editing a dead letter shows its body",
        );
    };
    let table = console.tables.outbox.clone();
    let read = with_pool!(console.pool.clone(), |pool| read(&pool, table, id).await);
    match read {
        Ok(Some((headers, body))) => form(&csrf, id, &headers, &body).into_response(),
        Ok(None) => refused(
            StatusCode::NOT_FOUND,
            &format!("no dead letter {id}: it was retried or dropped already"),
        ),
        Err(err) => failed(&err),
    }
}

/// `POST /dead/{id}/edit`: puts the dead letter back with the body and headers sent.
pub(crate) async fn save(
    State(console): Shared,
    Path(id): Path<i64>,
    form: Authorized<EditForm>,
) -> Response {
    let mut lines = Vec::new();
    for line in form.form.headers.lines().filter(|l| !l.trim().is_empty()) {
        let Some((name, value)) = line.split_once(':') else {
            return refused(
                StatusCode::BAD_REQUEST,
                &format!("header line {line:?} is not `name: value`: go back and fix it"),
            );
        };
        lines.push((name.trim().to_owned(), value.trim().to_owned()));
    }
    let by = form
        .session()
        .map_or_else(|| "console".to_owned(), super::session::Session::label);
    // The browser sends text areas with CRLF line ends; the body goes back as it was typed.
    let body = form.form.body.replace("\r\n", "\n").into_bytes();
    let edited = edit_and_retry(&console, id, &by, body, lines).await;
    match edited {
        Ok(true) => {
            tracing::info!(id, %by, "console: outgoing dead letter edited and retried");
            form.back(&Done::Edited(id))
        }
        Ok(false) => form.back(&Done::NoDeadLetter(id)),
        Err(err) => failed(&err),
    }
}

async fn edit_and_retry(
    console: &Console,
    id: i64,
    by: &str,
    body: Vec<u8>,
    headers: Vec<(String, String)>,
) -> anyhow::Result<bool> {
    let table = console.tables.outbox.clone();
    with_pool!(console.pool.clone(), |pool| {
        let outbox = Outbox::in_table(table);
        let Some((old, _)) = outbox.dead_letter_message(&pool, id).await? else {
            return Ok(false);
        };
        // The form holds every header: those it left out are removed.
        let mut edit = DeadEdit::by(by).body(body);
        for (name, _) in old {
            edit = edit.without_header(name);
        }
        for (name, value) in headers {
            edit = edit.header(name, value);
        }
        Ok(outbox.retry_dead_edited(&pool, id, &edit).await?)
    })
}

async fn read<DB: Backend>(
    pool: &guestlist::sqlx::Pool<DB>,
    table: guestlist::TableName,
    id: i64,
) -> anyhow::Result<Option<(Vec<(String, String)>, Vec<u8>)>> {
    Ok(Outbox::<DB>::in_table(table)
        .dead_letter_message(pool, id)
        .await?)
}

/// The form: the body as text, the headers a line each.
fn form(csrf: &str, id: i64, headers: &[(String, String)], body: &[u8]) -> Markup {
    let lines: String = headers
        .iter()
        .filter(|(name, _)| !name.eq_ignore_ascii_case(guestlist::outbox::EDITED_HEADER))
        .map(|(name, value)| format!("{name}: {value}\n"))
        .collect();
    html! {
        (DOCTYPE)
        html lang="en" {
            head {
                meta charset="utf-8";
                title { "guestlist console: edit dead letter " (id) }
                style { (PreEscaped(STYLE)) }
            }
            body {
                h1 { "Edit dead letter " (id) " and retry it" }
                @match std::str::from_utf8(body) {
                    Ok(text) => {
                        form #edit method="post" action={ "/dead/" (id) "/edit" } {
                            (csrf_field(csrf))
                            p { label for="headers" { "Headers, a " code { "name: value" } " line each (a header left out is removed)" } }
                            textarea #headers name="headers" rows="6" cols="100" { (lines) }
                            p { label for="body" { "Body" } }
                            textarea #body name="body" rows="16" cols="100" { (text) }
                            p { button #save { "retry edited" } }
                        }
                    }
                    Err(_) => p.trouble {
                        "its body is not text: edit it with " code {
                            "guestlist outbox dead retry " (id) " --body FILE"
                        }
                    },
                }
                p { a href="/" { "back to the console" } }
            }
        }
    }
}
