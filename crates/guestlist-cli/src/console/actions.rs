//! What an operator can do from the page: sign in and out, retry or drop an outgoing dead
//! letter, evict a key. Each action checks, in order, that the console takes actions, that the
//! form came from the console's own page, that the browser signed in, and that the form's CSRF
//! token is this session's; then it acts and sends the browser back to the page (303) with a
//! line on what it did.

use std::time::Duration;

use axum::Form;
use axum::extract::{Path, State};
use axum::http::header::{LOCATION, SET_COOKIE};
use axum::http::{HeaderMap, HeaderValue, StatusCode};
use axum::response::{Html, IntoResponse, Response};
use guestlist::{Backend, IdempotencyKey, Outbox, Scope};

use super::session::{Session, Sessions, same_origin};
use super::{Console, Shared, Tables, page};
use crate::database::with_pool;

/// A page that says why a request was refused and what to do, with `status`.
pub(crate) fn refused(status: StatusCode, message: &str) -> Response {
    (status, Html(page::refusal(message))).into_response()
}

/// An action's form: its CSRF token, and for an eviction the key.
#[derive(Debug, serde::Deserialize)]
pub(crate) struct ActionForm {
    #[serde(default)]
    csrf: String,
    #[serde(default)]
    scope: String,
    #[serde(default)]
    key: String,
    #[serde(default)]
    force: Option<String>,
}

/// The sign-in form.
#[derive(Debug, serde::Deserialize)]
pub(crate) struct LoginForm {
    #[serde(default)]
    token: String,
}

/// What the last action did, carried in the page's address: only these fixed lines can be
/// shown, so that a link cannot make the page say something else.
#[derive(Debug, Default, serde::Deserialize)]
pub(crate) struct Done {
    done: Option<String>,
    // Text, not a number: a flattened field reaches serde as text.
    id: Option<String>,
    scope: Option<String>,
    key: Option<String>,
}

impl Done {
    /// The line to show, if any.
    pub(crate) fn message(&self, tables: &Tables) -> Option<String> {
        let id: i64 = self
            .id
            .as_deref()
            .unwrap_or_default()
            .parse()
            .unwrap_or_default();
        let (scope, key) = (
            self.scope.as_deref().unwrap_or_default(),
            self.key.as_deref().unwrap_or_default(),
        );
        Some(match self.done.as_deref()? {
            "signed-in" => "signed in: retry, drop and evict are enabled".to_owned(),
            "signed-out" => "signed out".to_owned(),
            "wrong-token" => "that is not the console's token: sign in with the value of \
                 GUESTLIST_CONSOLE_TOKEN it was started with"
                .to_owned(),
            "retried" => format!(
                "dead letter {id} is back in {}: the relay publishes it after what is pending",
                tables.outbox
            ),
            "dropped" => format!("dead letter {id} dropped"),
            "no-dead" => format!("no dead letter {id}: it was retried or dropped already"),
            "evicted" => format!(
                "key {key} in scope {scope} evicted: the next request with it runs again (a \
                 gateway that stored or replayed it lately may still answer from memory until \
                 its --replay-cache-ttl ends)"
            ),
            "no-key" => format!("no key {key} in scope {scope}: nothing removed"),
            "in-flight" => format!(
                "key {key} in scope {scope} is in flight: evicting it now lets a retry run the \
                 request again while the first may still be running, and the first one's answer \
                 would not be stored. Wait for its lease, or tick \"even in flight\""
            ),
            _ => return None,
        })
    }
}

/// Back to the page, with what was done (and the id looked up, after an eviction).
fn back(done: &str, fields: &[(&str, &str)], cookie: Option<String>) -> Response {
    let mut query = url::form_urlencoded::Serializer::new(String::new());
    query.append_pair("done", done);
    for (name, value) in fields {
        query.append_pair(name, value);
    }
    let mut response = StatusCode::SEE_OTHER.into_response();
    let headers = response.headers_mut();
    if let Ok(location) = HeaderValue::from_str(&format!("/?{}", query.finish())) {
        headers.insert(LOCATION, location);
    }
    if let Some(cookie) = cookie.and_then(|c| HeaderValue::from_str(&c).ok()) {
        headers.insert(SET_COOKIE, cookie);
    }
    response
}

/// Why an action was refused (403), and what to do.
struct Forbidden(&'static str);

impl IntoResponse for Forbidden {
    fn into_response(self) -> Response {
        refused(StatusCode::FORBIDDEN, self.0)
    }
}

/// The checks every action passes before it acts.
fn authorize<'a>(
    console: &'a Console,
    headers: &HeaderMap,
    csrf: Option<&str>,
) -> Result<(&'a Sessions, Option<Session>), Forbidden> {
    let Some(sessions) = &console.sessions else {
        return Err(Forbidden(
            "this console is read-only: start it with GUESTLIST_CONSOLE_TOKEN set (a long \
             random string) to retry, drop and evict",
        ));
    };
    if !same_origin(headers) {
        return Err(Forbidden(
            "this form was sent from another site's page, not from the console's own: open \
             the console and act from there",
        ));
    }
    let Some(csrf) = csrf else {
        return Ok((sessions, None));
    };
    let Some(session) = sessions.session(headers) else {
        return Err(Forbidden(
            "sign in first: enter GUESTLIST_CONSOLE_TOKEN in the console's sign-in form (a \
             restarted console has forgotten its sessions)",
        ));
    };
    if !sessions.csrf_is(&session, csrf) {
        return Err(Forbidden(
            "the form's CSRF token is missing or not this session's (the console restarted, or \
             the form came from elsewhere): reload the console and try again",
        ));
    }
    Ok((sessions, Some(session)))
}

/// `POST /login`: the operator's token buys a session cookie.
pub(crate) async fn login(
    State(console): Shared,
    headers: HeaderMap,
    Form(form): Form<LoginForm>,
) -> Response {
    let sessions = match authorize(&console, &headers, None) {
        Ok((sessions, _)) => sessions,
        Err(refusal) => return refusal.into_response(),
    };
    if !sessions.token_is(&form.token) {
        // Slows down guessing; the operator who mistyped barely notices.
        tokio::time::sleep(Duration::from_millis(500)).await;
        return back("wrong-token", &[], None);
    }
    back("signed-in", &[], Some(sessions.open()))
}

/// `POST /logout`: ends the session.
pub(crate) async fn logout(
    State(console): Shared,
    headers: HeaderMap,
    Form(form): Form<ActionForm>,
) -> Response {
    match authorize(&console, &headers, Some(&form.csrf)) {
        Ok(_) => back("signed-out", &[], Some(Sessions::close())),
        Err(refusal) => refusal.into_response(),
    }
}

/// `POST /dead/{id}/retry` puts an outgoing dead letter back in the outbox; `POST
/// /dead/{id}/drop` deletes it for good.
pub(crate) async fn dead_letter(
    State(console): Shared,
    Path((id, action)): Path<(i64, String)>,
    headers: HeaderMap,
    Form(form): Form<ActionForm>,
) -> Response {
    let (what, done) = match action.as_str() {
        "retry" => (Letter::Retry, "retried"),
        "drop" => (Letter::Drop, "dropped"),
        _ => {
            return refused(
                StatusCode::NOT_FOUND,
                "a dead letter can be retried or dropped",
            );
        }
    };
    if let Err(refusal) = authorize(&console, &headers, Some(&form.csrf)) {
        return refusal.into_response();
    }
    let outbox = console.tables.outbox.clone();
    let changed = with_pool!(console.pool.clone(), |pool| on_letter(
        &pool, outbox, id, what
    )
    .await);
    let id_text = id.to_string();
    match changed {
        Ok(true) => {
            tracing::info!(id, action = done, "console: outgoing dead letter");
            back(done, &[("id", &id_text)], None)
        }
        Ok(false) => back("no-dead", &[("id", &id_text)], None),
        Err(err) => failed(&err),
    }
}

#[derive(Clone, Copy)]
enum Letter {
    Retry,
    Drop,
}

async fn on_letter<DB: Backend>(
    pool: &guestlist::sqlx::Pool<DB>,
    table: guestlist::TableName,
    id: i64,
    what: Letter,
) -> Result<bool, guestlist::Error> {
    let outbox = Outbox::<DB>::in_table(table);
    match what {
        Letter::Retry => outbox.retry_dead(pool, id).await,
        Letter::Drop => outbox.drop_dead(pool, id).await,
    }
}

/// `POST /keys/evict`: removes one idempotency key, so that the next request with it runs
/// again; a key in flight only when the form says so.
pub(crate) async fn evict(
    State(console): Shared,
    headers: HeaderMap,
    Form(form): Form<ActionForm>,
) -> Response {
    if let Err(refusal) = authorize(&console, &headers, Some(&form.csrf)) {
        return refusal.into_response();
    }
    let (scope, key) = match (
        Scope::new(form.scope.clone()),
        IdempotencyKey::new(form.key.clone()),
    ) {
        (Ok(scope), Ok(key)) => (scope, key),
        (Err(err), _) | (_, Err(err)) => {
            return refused(
                StatusCode::BAD_REQUEST,
                &format!("{err}: look the key up again"),
            );
        }
    };
    let force = form.force.is_some();
    let table = console.tables.keys.clone();
    let outcome = with_pool!(console.pool.clone(), |pool| evict_key(
        pool, table, &scope, &key, force
    )
    .await);
    let fields = [
        ("scope", form.scope.as_str()),
        ("key", form.key.as_str()),
        ("trace", form.key.as_str()),
    ];
    match outcome {
        Ok(Evicted::Removed) => {
            tracing::info!(%scope, %key, "console: key evicted");
            back("evicted", &fields, None)
        }
        Ok(Evicted::None) => back("no-key", &fields, None),
        Ok(Evicted::InFlight) => back("in-flight", &fields, None),
        Err(err) => failed(&err),
    }
}

enum Evicted {
    Removed,
    None,
    InFlight,
}

async fn evict_key<DB: Backend>(
    pool: guestlist::sqlx::Pool<DB>,
    table: guestlist::TableName,
    scope: &Scope,
    key: &IdempotencyKey,
    force: bool,
) -> anyhow::Result<Evicted> {
    let keys = crate::keys::sql_keys(pool, table.as_str())?;
    let Some(record) = keys.inspect(scope, key).await? else {
        return Ok(Evicted::None);
    };
    if crate::keys::held(&record, force).is_some() {
        return Ok(Evicted::InFlight);
    }
    Ok(if keys.evict(scope, key).await? {
        Evicted::Removed
    } else {
        Evicted::None
    })
}

fn failed(err: &dyn std::fmt::Display) -> Response {
    tracing::warn!(%err, "console: an action failed");
    refused(
        StatusCode::INTERNAL_SERVER_ERROR,
        &format!("{err:#}: nothing was changed; check the database and try again"),
    )
}
