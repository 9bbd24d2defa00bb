//! What an operator can do from the page: sign in and out, retry or drop an outgoing dead
//! letter, evict a key. Each action checks, in order, that the console takes actions, that the
//! form came from the console's own page, that the browser signed in, and that the form's CSRF
//! token is this session's; then it acts and sends the browser back to the page (303) with a
//! line on what it did.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use axum::Form;
use axum::extract::{ConnectInfo, FromRequest, Path, Request, State};
use axum::http::header::{LOCATION, RETRY_AFTER, SET_COOKIE};
use axum::http::{HeaderMap, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use guestlist::{Backend, IdempotencyKey, Outbox, keys::Scope};
use serde::de::DeserializeOwned;

use super::done::{Done, Key};
use super::session::{Session, Sessions, same_origin};
use super::{Console, Shared, page};
use crate::database::with_pool;

/// A page that says why a request was refused and what to do, with `status`.
pub(crate) fn refused(status: StatusCode, message: &str) -> Response {
    (status, page::refusal(message)).into_response()
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

/// A form an action takes, and the CSRF token it carries where the action needs a session.
pub(crate) trait Csrf {
    /// The form's CSRF token; `None` for a form sent before signing in (the sign-in's own).
    fn csrf(&self) -> Option<&str>;
}

impl Csrf for ActionForm {
    fn csrf(&self) -> Option<&str> {
        Some(&self.csrf)
    }
}

impl Csrf for LoginForm {
    fn csrf(&self) -> Option<&str> {
        None
    }
}

/// Back to the page, with what was done, sealed for `bound`, the session the browser comes back
/// with; `cookie` set.
fn back(
    sessions: &Sessions,
    bound: Option<&Session>,
    done: &Done,
    cookie: Option<String>,
) -> Response {
    let address = done.address();
    let seal = sessions.seal(bound, &address);
    let mut response = StatusCode::SEE_OTHER.into_response();
    let headers = response.headers_mut();
    if let Ok(location) = HeaderValue::from_str(&format!("/?{address}&seal={seal}")) {
        headers.insert(LOCATION, location);
    }
    if let Some(cookie) = cookie.and_then(|c| HeaderValue::from_str(&c).ok()) {
        headers.insert(SET_COOKIE, cookie);
    }
    response
}

/// Why an action was refused (403), and what to do.
pub(crate) struct Forbidden(&'static str);

impl IntoResponse for Forbidden {
    fn into_response(self) -> Response {
        refused(StatusCode::FORBIDDEN, self.0)
    }
}

/// An action's form from an operator the console lets act: the console takes actions, the form
/// came from the console's own page, and, for a form with a CSRF token, the browser signed in
/// and the token is its session's. Refused with [`Forbidden`] otherwise (a form that cannot be
/// read at all gets axum's own answer).
pub(crate) struct Authorized<F> {
    /// The form.
    pub(crate) form: F,
    /// The console it was sent to.
    pub(crate) console: Arc<Console>,
    /// The browser's session (always, for a form with a CSRF token).
    session: Option<Session>,
}

impl<F> Authorized<F> {
    /// The sessions of the console, which takes actions (or the form would have been refused).
    fn sessions(&self) -> &Sessions {
        self.console
            .sessions
            .as_ref()
            .expect("an authorized form reached a console that takes actions")
    }

    /// The browser's session, where the form needed one.
    pub(crate) fn session(&self) -> Option<&Session> {
        self.session.as_ref()
    }

    /// Back to the page, with what was done, sealed for this browser's session.
    pub(crate) fn back(&self, done: &Done) -> Response {
        back(self.sessions(), self.session.as_ref(), done, None)
    }
}

impl<F: DeserializeOwned + Csrf + Send> FromRequest<Arc<Console>> for Authorized<F> {
    type Rejection = Response;

    async fn from_request(request: Request, console: &Arc<Console>) -> Result<Self, Response> {
        let headers = request.headers().clone();
        let Form(form) = Form::<F>::from_request(request, console)
            .await
            .map_err(IntoResponse::into_response)?;
        let session =
            authorize(console, &headers, form.csrf()).map_err(IntoResponse::into_response)?;
        Ok(Self {
            form,
            console: Arc::clone(console),
            session,
        })
    }
}

/// The checks every action passes before it acts; the browser's session, if it has one.
fn authorize(
    console: &Console,
    headers: &HeaderMap,
    csrf: Option<&str>,
) -> Result<Option<Session>, Forbidden> {
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
        return Ok(sessions.session(headers));
    };
    let Some(session) = sessions.session(headers) else {
        return Err(Forbidden(
            "sign in first: enter GUESTLIST_CONSOLE_TOKEN in the console's sign-in form (a \
             session signed out is over, and a restarted console has forgotten its sessions)",
        ));
    };
    if !sessions.csrf_is(&session, csrf) {
        return Err(Forbidden(
            "the form's CSRF token is missing or not this session's (the console restarted, or \
             the form came from elsewhere): reload the console and try again",
        ));
    }
    Ok(Some(session))
}

/// `POST /login`: the operator's token buys a session cookie. At most a few attempts a minute
/// from one client, and a few more from all ([`Attempts`](super::attempts::Attempts)); a wrong
/// token is logged with the client that sent it.
pub(crate) async fn login(
    ConnectInfo(client): ConnectInfo<SocketAddr>,
    login: Authorized<LoginForm>,
) -> Response {
    if let Err(wait) = login.console.attempts.take(client.ip()) {
        tracing::warn!(%client, ?wait, "console: sign-in refused: too many attempts");
        return too_many_attempts(wait);
    }
    if !login.sessions().token_is(&login.form.token) {
        tracing::warn!(%client, "console: sign-in with a wrong token");
        // Slows down guessing; the operator who mistyped barely notices.
        tokio::time::sleep(Duration::from_millis(500)).await;
        return login.back(&Done::WrongToken);
    }
    let (session, cookie) = login.sessions().open();
    back(
        login.sessions(),
        Some(&session),
        &Done::SignedIn,
        Some(cookie),
    )
}

/// 429 for a sign-in past the limit, with when to try again.
fn too_many_attempts(wait: Duration) -> Response {
    let seconds = wait.as_secs() + u64::from(wait.subsec_nanos() > 0);
    let message = format!(
        "too many sign-in attempts (at most 5 a minute from one client, 20 from all): try again \
         in {seconds} s. Every attempt is logged"
    );
    let mut response = refused(StatusCode::TOO_MANY_REQUESTS, &message);
    response
        .headers_mut()
        .insert(RETRY_AFTER, HeaderValue::from(seconds));
    response
}

/// `POST /logout`: ends the session, for good (its cookie and forms are refused after).
pub(crate) async fn logout(headers: HeaderMap, logout: Authorized<ActionForm>) -> Response {
    let cookie = logout.sessions().close(&headers);
    back(logout.sessions(), None, &Done::SignedOut, Some(cookie))
}

/// `POST /dead/{id}/retry` puts an outgoing dead letter back in the outbox; `POST
/// /dead/{id}/drop` deletes it for good.
pub(crate) async fn dead_letter(
    State(console): Shared,
    Path((id, action)): Path<(i64, String)>,
    form: Authorized<ActionForm>,
) -> Response {
    let what = match action.as_str() {
        "retry" => Letter::Retry,
        "drop" => Letter::Drop,
        _ => {
            return refused(
                StatusCode::NOT_FOUND,
                "a dead letter can be retried or dropped",
            );
        }
    };
    let outbox = console.tables.outbox.clone();
    let changed = with_pool!(console.pool.clone(), |pool| on_letter(
        &pool, outbox, id, what
    )
    .await);
    match (changed, what) {
        (Ok(true), Letter::Retry) => {
            tracing::info!(id, action = "retried", "console: outgoing dead letter");
            form.back(&Done::Retried(id))
        }
        (Ok(true), Letter::Drop) => {
            tracing::info!(id, action = "dropped", "console: outgoing dead letter");
            form.back(&Done::Dropped(id))
        }
        (Ok(false), _) => form.back(&Done::NoDeadLetter(id)),
        (Err(err), _) => failed(&err),
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
pub(crate) async fn evict(State(console): Shared, action: Authorized<ActionForm>) -> Response {
    let form = &action.form;
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
    let named = Key {
        scope: form.scope.clone(),
        key: form.key.clone(),
    };
    match outcome {
        Ok(Evicted::Removed) => {
            tracing::info!(%scope, %key, "console: key evicted");
            action.back(&Done::Evicted(named))
        }
        Ok(Evicted::None) => action.back(&Done::NoKey(named)),
        Ok(Evicted::InFlight) => action.back(&Done::InFlight(named)),
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

pub(crate) fn failed(err: &dyn std::fmt::Display) -> Response {
    tracing::warn!(%err, "console: an action failed");
    refused(
        StatusCode::INTERNAL_SERVER_ERROR,
        &format!("{err:#}: nothing was changed; check the database and try again"),
    )
}
