//! `guestlist console`: a small web page for operators, written on the server, that shows what
//! `guestlist stats` shows and keeps it fresh, looks ids up as `guestlist history` does, and
//! retries or drops an outgoing dead letter and evicts a key.
//!
//! It listens on loopback unless told otherwise. Actions need the token the console was started
//! with (`GUESTLIST_CONSOLE_TOKEN`): the operator signs in with it once and gets a session
//! cookie (HttpOnly, SameSite=Strict), and every action form carries a CSRF token tied to that
//! session; a form posted from another origin is refused. Without a token the console is
//! read-only.

mod actions;
mod done;
mod forms;
mod live;
mod page;
mod session;
mod snapshot;

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context as _;
use axum::Router;
use axum::extract::{Query, Request, State};
use axum::http::header::{CACHE_CONTROL, CONTENT_SECURITY_POLICY, HOST};
use axum::http::{HeaderMap, HeaderValue, StatusCode};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use clap::Args;
use guestlist::TableName;

use self::forms::Viewer;
use self::page::Frame;
use self::session::{Sessions, TOKEN_VAR};
use self::snapshot::{Retentions, Snapshot};
use crate::database::{self, AnyPool, DatabaseUrl, with_pool};

#[derive(Debug, Args)]
pub(crate) struct ConsoleArgs {
    #[command(flatten)]
    database: DatabaseUrl,
    /// Where the page listens. Loopback by default: anyone who reaches it reads message ids,
    /// keys and why messages were refused.
    #[arg(long, default_value = "127.0.0.1:8089")]
    listen: SocketAddr,
    #[command(flatten)]
    tables: crate::history::HistoryTables,
    /// How often the page reads the figures again.
    #[arg(long, value_parser = humantime::parse_duration, default_value = "5s")]
    refresh: Duration,
    /// How long the inbox keeps its rows: the page counts the rows past it that a purge has
    /// not deleted yet.
    #[arg(long, value_parser = humantime::parse_duration, default_value = "7d")]
    inbox_retention: Duration,
    /// How long the key table keeps its keys (the gateway's --retention).
    #[arg(long, value_parser = humantime::parse_duration, default_value = "24h")]
    key_retention: Duration,
}

/// The three tables the console reads, validated before any is formatted into SQL.
#[derive(Clone)]
pub(crate) struct Tables {
    /// The inbox.
    pub(crate) inbox: TableName,
    /// The outbox.
    pub(crate) outbox: TableName,
    /// The idempotency keys.
    pub(crate) keys: TableName,
}

/// What every request of the console shares.
pub(crate) struct Console {
    pool: AnyPool,
    tables: Tables,
    retentions: Retentions,
    refresh: Duration,
    database: String,
    /// `None`: read-only.
    sessions: Option<Sessions>,
    /// The `Host` values the console answers to; `None` answers to any.
    hosts: Option<Vec<String>>,
}

type Shared = State<Arc<Console>>;

pub(crate) async fn run(args: ConsoleArgs) -> anyhow::Result<()> {
    let (inbox, outbox, keys) = args.tables.names()?;
    let tables = Tables {
        inbox,
        outbox,
        keys,
    };
    let sessions = match std::env::var(TOKEN_VAR) {
        Ok(token) => Some(Sessions::new(&token)?),
        Err(std::env::VarError::NotPresent) => None,
        Err(err) => anyhow::bail!("{TOKEN_VAR}: {err}"),
    };
    let pool = database::connect_existing(&args.database, 2).await?;
    let listener = tokio::net::TcpListener::bind(args.listen)
        .await
        .with_context(|| {
            format!(
                "cannot listen on {}: is another program there? Pass --listen 127.0.0.1:PORT",
                args.listen
            )
        })?;
    let listen = listener.local_addr()?;
    // On loopback, a page under another name (DNS rebinding) must not read the console.
    let hosts = listen.ip().is_loopback().then(|| {
        let port = listen.port();
        vec![
            format!("127.0.0.1:{port}"),
            format!("localhost:{port}"),
            format!("[::1]:{port}"),
        ]
    });
    let actions = if sessions.is_some() {
        "actions enabled: sign in on the page with GUESTLIST_CONSOLE_TOKEN"
    } else {
        "read-only: set GUESTLIST_CONSOLE_TOKEN to retry, drop and evict"
    };
    println!("guestlist console on http://{listen}/ ({actions})");
    if !listen.ip().is_loopback() && sessions.is_some() {
        tracing::warn!(
            %listen,
            "the console speaks plain HTTP: its token and session cross the network unencrypted; \
             put it behind a TLS proxy or keep it on 127.0.0.1"
        );
    }
    let console = Arc::new(Console {
        pool,
        tables,
        retentions: Retentions {
            inbox: args.inbox_retention,
            keys: args.key_retention,
        },
        refresh: args.refresh,
        database: database::redact(&args.database),
        sessions,
        hosts,
    });
    let app = Router::new()
        .route("/", get(show))
        .route("/live", get(live))
        .route("/login", post(actions::login))
        .route("/logout", post(actions::logout))
        .route("/dead/{id}/{action}", post(actions::dead_letter))
        .route("/keys/evict", post(actions::evict))
        .layer(axum::middleware::from_fn_with_state(
            Arc::clone(&console),
            guard,
        ))
        .with_state(console);
    let terminated = crate::signal::Terminated::install()?;
    axum::serve(listener, app)
        .with_graceful_shutdown(terminated.wait())
        .await
        .context("the console's server stopped")?;
    Ok(())
}

/// What the page's address may carry: an id to look up, and what the last action did.
#[derive(Debug, Default, serde::Deserialize)]
pub(crate) struct PageQuery {
    trace: Option<String>,
    #[serde(flatten)]
    done: done::DoneQuery,
}

/// The page.
async fn show(
    State(console): Shared,
    headers: HeaderMap,
    Query(query): Query<PageQuery>,
) -> Response {
    let csrf = console.csrf(&headers);
    let viewer = console.viewer(csrf.as_deref());
    let trace = match query.trace.filter(|id| !id.trim().is_empty()) {
        Some(id) => {
            let id = id.trim().to_owned();
            let tables = console.tables.clone();
            let found = with_pool!(console.pool.clone(), |pool| crate::history::find(
                &pool,
                (tables.inbox, tables.outbox, tables.keys),
                &id
            )
            .await);
            Some((id, found.map_err(|err| format!("{err:#}"))))
        }
        None => None,
    };
    let snapshot = console.snapshot().await;
    let nonce = hex::encode(rand::random::<[u8; 16]>());
    let frame = Frame {
        database: &console.database,
        refresh: console.refresh,
        done: done::Done::from_query(&query.done).map(|done| (done, &console.tables)),
        trace,
        nonce: &nonce,
    };
    let mut response = page::page(&frame, &viewer, &snapshot).into_response();
    let policy = format!(
        "default-src 'none'; style-src 'unsafe-inline'; script-src 'nonce-{nonce}'; \
         connect-src 'self'; form-action 'self'; frame-ancestors 'none'; base-uri 'none'"
    );
    if let Ok(policy) = HeaderValue::from_str(&policy) {
        response
            .headers_mut()
            .insert(CONTENT_SECURITY_POLICY, policy);
    }
    response
}

/// The figures alone, which the page fetches to refresh itself.
async fn live(State(console): Shared, headers: HeaderMap) -> maud::Markup {
    let csrf = console.csrf(&headers);
    let viewer = console.viewer(csrf.as_deref());
    live::live(&viewer, &console.snapshot().await)
}

impl Console {
    /// The CSRF token of the session `headers` carry, when signed in.
    fn csrf(&self, headers: &HeaderMap) -> Option<String> {
        let sessions = self.sessions.as_ref()?;
        Some(sessions.csrf(&sessions.session(headers)?))
    }

    fn viewer<'a>(&self, csrf: Option<&'a str>) -> Viewer<'a> {
        Viewer {
            csrf,
            actions: self.sessions.is_some(),
        }
    }

    async fn snapshot(&self) -> Snapshot {
        with_pool!(self.pool.clone(), |pool| Snapshot::read(
            &pool,
            &self.tables,
            self.retentions
        )
        .await)
    }
}

/// Answers only to the console's own names when on loopback, and keeps every answer out of
/// caches and frames.
async fn guard(State(console): Shared, request: Request, next: Next) -> Response {
    if let Some(hosts) = &console.hosts {
        let host = request
            .headers()
            .get(HOST)
            .and_then(|h| h.to_str().ok())
            .unwrap_or_default();
        if !hosts
            .iter()
            .any(|allowed| allowed.eq_ignore_ascii_case(host))
        {
            let message = format!(
                "this console answers to {} only, not to {host:?}: open http://{}/",
                hosts.join(", "),
                hosts[0]
            );
            return actions::refused(StatusCode::MISDIRECTED_REQUEST, &message);
        }
    }
    let mut response = next.run(request).await;
    let headers = response.headers_mut();
    headers.insert(CACHE_CONTROL, HeaderValue::from_static("no-store"));
    headers.insert("x-frame-options", HeaderValue::from_static("DENY"));
    headers.insert(
        "x-content-type-options",
        HeaderValue::from_static("nosniff"),
    );
    headers.insert("referrer-policy", HeaderValue::from_static("same-origin"));
    response
}
