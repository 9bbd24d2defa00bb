//! `guestlist console`: a small web page for operators, written on the server, that shows what
//! `guestlist stats` shows and keeps it fresh, looks ids up as `guestlist history` does,
//! retries or drops dead letters both ways (incoming ones by failure group too) and evicts a
//! key.
//!
//! It listens on loopback unless told otherwise. Actions need the token the console was started
//! with (`GUESTLIST_CONSOLE_TOKEN`): the operator signs in with it once and gets a session
//! cookie (HttpOnly, SameSite=Strict), and every action form carries a CSRF token tied to that
//! session; a form posted from another origin is refused. Without a token the console is
//! read-only.

mod actions;
mod activity;
mod attempts;
mod body;
mod chart;
mod done;
mod edit;
mod exposition;
mod forms;
mod inbox_actions;
mod incoming;
mod live;
mod outbox_groups;
mod over_time;
mod page;
mod samples;
mod scraped;
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
    /// A `Host` the console answers to (`name`, on any port, or `name:port`), besides
    /// `127.0.0.1`, `localhost` and `[::1]` on loopback; repeat it for several. Any other name
    /// gets 421. Off loopback, the console starts only with a token or with this list.
    #[arg(long = "allow-host", value_name = "HOST")]
    allow_hosts: Vec<String>,
    /// The broker an incoming dead letter is retried through (none: the page drops them but
    /// retries none).
    #[command(flatten)]
    broker: crate::broker::BrokerArgs,
    /// A program's metrics (`http://HOST:PORT/metrics`, its `--metrics-listen`), read for the
    /// charts no table can give: duplicates absorbed, deferrals, replays, 409s. Repeat it for
    /// each program.
    #[arg(long = "metrics-from", value_name = "URL")]
    metrics_from: Vec<reqwest::Url>,
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
    /// The sign-in attempts so far, limited per client and in all.
    attempts: attempts::Attempts,
    /// The broker incoming dead letters are retried through.
    broker: crate::broker::BrokerArgs,
    /// The figures sampled while the console runs, for its charts.
    samples: samples::Samples,
    /// The counts the charts drew last, drawn again for a few seconds.
    recent: activity::Recent,
    /// The programs' metrics, read for the charts.
    scraped: scraped::Scraped,
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
    anyhow::ensure!(
        args.listen.ip().is_loopback() || sessions.is_some() || !args.allow_hosts.is_empty(),
        "--listen {} is off loopback, and the console has no token and no --allow-host: anyone \
         who reaches it, and any web page under a name of its own (DNS rebinding), would read \
         its message ids, keys and reasons. Set {TOKEN_VAR}, name the hosts it answers to with \
         --allow-host HOST, or listen on 127.0.0.1 behind an SSH tunnel or a TLS proxy",
        args.listen
    );
    if args.broker.given() {
        // Which broker, before anything is opened: one this build lacks is the first thing to
        // hear.
        args.broker.broker("")?;
    }
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
    let hosts = answers_to(listen, &args.allow_hosts);
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
        attempts: attempts::Attempts::new(),
        broker: args.broker.clone(),
        samples: samples::Samples::default(),
        recent: activity::Recent::default(),
        scraped: scraped::Scraped::new(args.metrics_from),
    });
    // Samples the figures every half minute, whether or not a browser looks.
    let sampler = tokio::spawn({
        let console = Arc::clone(&console);
        async move {
            let mut every = tokio::time::interval(Duration::from_secs(30));
            loop {
                every.tick().await;
                console.snapshot().await;
            }
        }
    });
    let app = Router::new()
        .route("/", get(show))
        .route("/live", get(live))
        .route("/login", post(actions::login))
        .route("/logout", post(actions::logout))
        .route("/dead/{id}/edit", get(edit::page).post(edit::save))
        .route("/dead/{id}/{action}", post(actions::dead_letter))
        .route("/keys/evict", post(actions::evict))
        .route("/inbox/dead/{action}", post(inbox_actions::letter))
        .route("/inbox/group/{group}/{action}", post(inbox_actions::group))
        .route("/outbox/group/{group}/{action}", post(outbox_groups::group))
        .layer(axum::middleware::from_fn_with_state(
            Arc::clone(&console),
            guard,
        ))
        .with_state(console);
    let terminated = crate::signal::Terminated::install()?;
    // Each request knows its client's address: sign-in attempts are limited per client.
    axum::serve(
        listener,
        app.into_make_service_with_connect_info::<SocketAddr>(),
    )
    .with_graceful_shutdown(terminated.wait())
    .await
    .context("the console's server stopped")?;
    sampler.abort();
    Ok(())
}

/// The `Host` values a console listening on `listen` answers to: on loopback its own names (a
/// page under another name, by DNS rebinding, must not read it) and `allowed`; elsewhere
/// `allowed`, or any (`None`) when none is given.
fn answers_to(listen: SocketAddr, allowed: &[String]) -> Option<Vec<String>> {
    let mut hosts = Vec::new();
    if listen.ip().is_loopback() {
        let port = listen.port();
        hosts.extend([
            format!("127.0.0.1:{port}"),
            format!("localhost:{port}"),
            format!("[::1]:{port}"),
        ]);
    }
    hosts.extend(allowed.iter().cloned());
    (!hosts.is_empty()).then_some(hosts)
}

/// What the page's address may carry: an id to look up, and what the last action did.
#[derive(Debug, Default, serde::Deserialize)]
pub(crate) struct PageQuery {
    trace: Option<String>,
    /// The charts' span: `hour` (by default) or `day`.
    span: Option<String>,
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
        done: console
            .done(&headers, &query.done)
            .map(|done| (done, &console.tables)),
        trace,
        nonce: &nonce,
        span: span_of(query.span.as_deref()),
    };
    let charts = console.charts(frame.span).await;
    let mut response = page::page(&frame, &viewer, &snapshot, charts).into_response();
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
async fn live(
    State(console): Shared,
    headers: HeaderMap,
    Query(query): Query<PageQuery>,
) -> maud::Markup {
    let csrf = console.csrf(&headers);
    let viewer = console.viewer(csrf.as_deref());
    let snapshot = console.snapshot().await;
    let charts = console.charts(span_of(query.span.as_deref())).await;
    live::live(&viewer, &snapshot, charts)
}

/// The charts' span an address asks for.
fn span_of(span: Option<&str>) -> chart::Span {
    match span {
        Some("day") => chart::Span::Day,
        _ => chart::Span::Hour,
    }
}

impl Console {
    /// What the page's address says was done, if it carries this process's seal for the
    /// session `headers` carry (or for none, where they carry none).
    fn done(&self, headers: &HeaderMap, query: &done::DoneQuery) -> Option<done::Done> {
        let sessions = self.sessions.as_ref()?;
        let done = done::Done::from_query(query)?;
        let session = sessions.session(headers);
        sessions
            .is_sealed(session.as_ref(), &done.address(), query.seal()?)
            .then_some(done)
    }

    /// The CSRF token of the session `headers` carry, when signed in.
    fn csrf(&self, headers: &HeaderMap) -> Option<String> {
        let sessions = self.sessions.as_ref()?;
        Some(sessions.csrf(&sessions.session(headers)?))
    }

    fn viewer<'a>(&self, csrf: Option<&'a str>) -> Viewer<'a> {
        Viewer {
            csrf,
            actions: self.sessions.is_some(),
            broker: self.broker.given(),
        }
    }

    /// The charts over `span`: what the tables' timestamps give, and the samples.
    async fn charts(&self, span: chart::Span) -> maud::Markup {
        let now = samples::this_minute();
        let counted = match self.recent.get(span) {
            Some(counted) => counted,
            None => {
                let counted = with_pool!(self.pool.clone(), |pool| activity::read(
                    &pool,
                    &self.tables,
                    span,
                    now
                )
                .await);
                let counted = std::sync::Arc::new(counted);
                self.recent.put(span, std::sync::Arc::clone(&counted));
                counted
            }
        };
        let scraped = self.scraped.drawn(span, now);
        over_time::section(&self.samples, span, now, &counted, &scraped)
    }

    /// What the tables say now, kept in the charts' samples too.
    async fn snapshot(&self) -> Snapshot {
        let snapshot = with_pool!(self.pool.clone(), |pool| Snapshot::read(
            &pool,
            &self.tables,
            self.retentions
        )
        .await);
        self.samples.record(&snapshot);
        self.scraped.read(samples::this_minute()).await;
        snapshot
    }
}

/// Answers only to the console's own names when on loopback, and keeps every answer out of
/// caches and frames.
async fn guard(State(console): Shared, request: Request, next: Next) -> Response {
    let mut response = match misdirected(&console, &request) {
        Some(refused) => refused,
        None => match body::read_whole(request).await {
            Ok(request) => next.run(request).await,
            Err(refused) => refused,
        },
    };
    same_headers(response.headers_mut());
    response
}

/// The 421 for a request to a name this console does not answer to, on loopback (where a page
/// under another name, by DNS rebinding, must not read it).
fn misdirected(console: &Console, request: &Request) -> Option<Response> {
    let hosts = console.hosts.as_ref()?;
    let host = request
        .headers()
        .get(HOST)
        .and_then(|h| h.to_str().ok())
        .unwrap_or_default();
    // A name given without a port answers on any port.
    let name = host
        .rsplit_once(':')
        .filter(|(_, port)| port.bytes().all(|b| b.is_ascii_digit()))
        .map_or(host, |(name, _)| name);
    if hosts.iter().any(|allowed| {
        allowed.eq_ignore_ascii_case(host)
            || (!allowed.contains(':') && allowed.eq_ignore_ascii_case(name))
    }) {
        return None;
    }
    let message = format!(
        "this console answers to {} only, not to {host:?}: open http://{}/",
        hosts.join(", "),
        hosts[0]
    );
    Some(actions::refused(StatusCode::MISDIRECTED_REQUEST, &message))
}

/// The headers every answer carries, refusals and the page's figures included: no caching, no
/// framing, no sniffing, and, where the answer set none of its own (the page sets one with its
/// script's nonce), a policy that lets it load and run nothing.
fn same_headers(headers: &mut HeaderMap) {
    headers.insert(CACHE_CONTROL, HeaderValue::from_static("no-store"));
    headers.insert("x-frame-options", HeaderValue::from_static("DENY"));
    headers.insert(
        "x-content-type-options",
        HeaderValue::from_static("nosniff"),
    );
    headers.insert("referrer-policy", HeaderValue::from_static("same-origin"));
    if !headers.contains_key(CONTENT_SECURITY_POLICY) {
        headers.insert(
            CONTENT_SECURITY_POLICY,
            HeaderValue::from_static(
                "default-src 'none'; form-action 'self'; frame-ancestors 'none'; base-uri 'none'",
            ),
        );
    }
}
