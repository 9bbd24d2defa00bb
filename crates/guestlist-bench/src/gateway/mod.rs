//! `guestlist-bench gateway`: the `guestlist gateway` binary in front of a small upstream,
//! against the upstream alone, nginx as a plain reverse proxy, the one open-source idempotency
//! proxy that installs here, and the SQL a fresh key needs by hand, in one run.
//!
//! Figures, interleaved round by round (odd rounds reversed): `direct` (the load generator to
//! the upstream), `nginx` (Debian's nginx, `proxy_pass` with keep-alive to the upstream),
//! `gateway_fresh` (the gateway with a new key on every request: its claim, the proxied call,
//! the stored response) and `gateway_replay` (the gateway answering retries of stored keys
//! without the upstream), on each store: the given database, SQLite and Redis. On Redis also
//! `idempotent_proxy_fresh` and `idempotent_proxy_replay` (`idempotent-proxy-server` on the same
//! Redis, the same upstream), and on PostgreSQL `sql_floor` (the claim and the answer by hand,
//! one commit each, no HTTP). The load generator runs in this process: 32 keep-alive
//! connections in a closed loop.

mod floor;
mod nginx;
mod peer;
mod process;
mod spawned;

use axum::Router;
use axum::http::StatusCode;
use axum::routing::post;

use crate::Common;
use crate::measure::Plan;
use crate::report::Report;
use crate::requests::{self, CONNECTIONS, STORED_KEYS, send, stored_key};

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Figure {
    Direct,
    Nginx,
    Fresh,
    Replay,
    PeerFresh,
    PeerReplay,
    SqlFloor,
}

impl Figure {
    /// The figures measured on a store.
    fn on(store: &str) -> Vec<Figure> {
        let mut figures = vec![Figure::Direct, Figure::Nginx, Figure::Fresh, Figure::Replay];
        match store {
            "redis" => figures.extend([Figure::PeerFresh, Figure::PeerReplay]),
            "postgres" => figures.push(Figure::SqlFloor),
            _ => {}
        }
        figures
    }
}

impl requests::Figure for Figure {
    fn name(self) -> &'static str {
        match self {
            Figure::Direct => "direct",
            Figure::Nginx => "nginx",
            Figure::Fresh => "gateway_fresh",
            Figure::Replay => "gateway_replay",
            Figure::PeerFresh => "idempotent_proxy_fresh",
            Figure::PeerReplay => "idempotent_proxy_replay",
            Figure::SqlFloor => "sql_floor",
        }
    }
}

/// The upstream every figure reaches: answers 201 with a small JSON body, no database.
async fn upstream() -> anyhow::Result<String> {
    let app = Router::new().fallback(post(|| async {
        (
            StatusCode::CREATED,
            [("content-type", "application/json")],
            r#"{"id":"ch_3MmlLrLkdIwHu7ix0snN0B15","status":"succeeded"}"#,
        )
    }));
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
    let url = format!("http://{}", listener.local_addr()?);
    tokio::spawn(async move { axum::serve(listener, app).await });
    Ok(url)
}

pub(crate) async fn run(common: &Common) -> anyhow::Result<Report> {
    let plan = Plan::of(common);
    let mut report = Report::default();
    let upstream = upstream().await?;
    let nginx = nginx::start(&upstream).await?;
    let scratch = tempfile::tempdir()?;
    let mut stores = vec![(label(&common.database)?, common.database.clone())];
    if !common.database.starts_with("sqlite:") {
        let sqlite = format!(
            "sqlite:{}",
            scratch.path().join("bench-gateway.db").display()
        );
        stores.push(("sqlite", sqlite));
    }
    if label(&common.database)? != "redis" {
        stores.push(("redis", common.redis.clone()));
    }
    let client = reqwest::Client::builder()
        .pool_max_idle_per_host(CONNECTIONS)
        .build()?;
    // Keys of this run only, in stores that outlive it.
    let tag = format!("gl-bench-{}-", std::process::id());
    for (store, database) in stores {
        eprintln!("measuring the gateway on {store} …");
        let gateway = process::Gateway::start(&upstream, &database, scratch.path()).await?;
        let peer = match store {
            "redis" => Some(peer::start(&format!("{upstream}/v1/charges"), &database).await?),
            _ => None,
        };
        let floor = match store {
            "postgres" => Some(floor::prepare(&database, CONNECTIONS).await?),
            _ => None,
        };
        let targets = Targets {
            direct: format!("{upstream}/v1/charges"),
            nginx: format!("{}/v1/charges", nginx.url),
            gateway: format!("{}/v1/charges", gateway.url),
            peer: peer
                .as_ref()
                .map(|peer| format!("{}/{}", peer.url, peer::ROUTE))
                .unwrap_or_default(),
            floor: floor.clone(),
            tag: tag.clone(),
        };
        for n in 0..STORED_KEYS {
            let key = format!("stored-{n}");
            send(&client, &targets.gateway, Some(&key)).await?;
            if peer.is_some() {
                send(&client, &targets.peer, Some(&format!("{tag}{key}"))).await?;
            }
        }
        measure(&client, &targets, plan, store, &mut report).await?;
        let table = gateway.table.clone();
        drop((gateway, peer));
        forget(&database, &table, &tag).await?;
        if let Some(pool) = floor {
            floor::drop_table(&pool).await?;
        }
        for (name, over, under) in [
            ("fresh_vs_nginx", "gateway_fresh", "nginx"),
            ("replay_vs_nginx", "gateway_replay", "nginx"),
            ("nginx_vs_direct", "nginx", "direct"),
            ("fresh_vs_sql_floor", "gateway_fresh", "sql_floor"),
        ] {
            report.ratio(name, over, under, store, CONNECTIONS);
        }
        for (name, over, under) in [
            (
                "fresh_redis_vs_idempotent_proxy",
                "gateway_fresh",
                "idempotent_proxy_fresh",
            ),
            (
                "replay_redis_vs_idempotent_proxy",
                "gateway_replay",
                "idempotent_proxy_replay",
            ),
        ] {
            if store == "redis" {
                let ratio = report.quotient(over, under, store, CONNECTIONS);
                report.record(name, ratio);
            }
        }
    }
    drop(nginx);
    Ok(report)
}

/// Forgets what this run stored: the key table a gateway made (SQLite's file goes with the
/// scratch directory), or on Redis the gateway's keys and the peer's, so that runs do not pile
/// keys up in a shared store.
async fn forget(database: &str, table: &str, tag: &str) -> anyhow::Result<()> {
    use guestlist::sqlx::{Connection, Executor};

    let statement = format!("DROP TABLE IF EXISTS {table}");
    match label(database)? {
        "postgres" => {
            let mut conn = guestlist::sqlx::PgConnection::connect(database).await?;
            conn.execute(guestlist::sqlx::AssertSqlSafe(statement))
                .await?;
        }
        "mysql" => {
            let url = database.replacen("mariadb:", "mysql:", 1);
            let mut conn = guestlist::sqlx::MySqlConnection::connect(&url).await?;
            conn.execute(guestlist::sqlx::AssertSqlSafe(statement))
                .await?;
        }
        "redis" => {
            let mut conn = redis::Client::open(database)?
                .get_multiplexed_async_connection()
                .await?;
            for pattern in [format!("{table}:*"), format!("ANON:POST:{tag}*")] {
                let names: Vec<String> = redis::cmd("KEYS")
                    .arg(&pattern)
                    .query_async(&mut conn)
                    .await?;
                for chunk in names.chunks(1_000) {
                    let _: i64 = redis::cmd("DEL").arg(chunk).query_async(&mut conn).await?;
                }
            }
        }
        _ => {}
    }
    Ok(())
}

fn label(url: &str) -> anyhow::Result<&'static str> {
    Ok(match url.split(':').next().unwrap_or_default() {
        "postgres" | "postgresql" => "postgres",
        "mysql" | "mariadb" => "mysql",
        "sqlite" => "sqlite",
        "redis" | "rediss" => "redis",
        _ => anyhow::bail!(
            "cannot tell the store from {url:?}: use postgres://, mysql://, sqlite: or redis://"
        ),
    })
}

/// Where each figure sends its requests.
#[derive(Debug, Clone)]
struct Targets {
    direct: String,
    nginx: String,
    gateway: String,
    /// The peer proxy's route (Redis only).
    peer: String,
    /// The floor's pool (PostgreSQL only).
    floor: Option<guestlist::sqlx::PgPool>,
    /// What this run's keys at the peer start with.
    tag: String,
}

async fn measure(
    client: &reqwest::Client,
    targets: &Targets,
    plan: Plan,
    backend: &'static str,
    report: &mut Report,
) -> anyhow::Result<()> {
    let (client, targets) = (client.clone(), targets.clone());
    requests::measure(
        plan,
        &Figure::on(backend),
        backend,
        move |figure, round, worker, n| {
            let (client, targets) = (client.clone(), targets.clone());
            async move {
                let fresh = format!("{backend}-r{round}-w{worker}-{n}");
                match figure {
                    Figure::Direct => send(&client, &targets.direct, None).await,
                    Figure::Nginx => send(&client, &targets.nginx, None).await,
                    Figure::Fresh => send(&client, &targets.gateway, Some(&fresh)).await,
                    Figure::Replay => {
                        send(&client, &targets.gateway, Some(&stored_key(worker, n))).await
                    }
                    Figure::PeerFresh => {
                        let key = format!("{}{fresh}", targets.tag);
                        send(&client, &targets.peer, Some(&key)).await
                    }
                    Figure::PeerReplay => {
                        let key = format!("{}{}", targets.tag, stored_key(worker, n));
                        send(&client, &targets.peer, Some(&key)).await
                    }
                    Figure::SqlFloor => {
                        let pool = targets.floor.as_ref().expect("measured on PostgreSQL");
                        floor::claim_and_answer(pool, &fresh).await
                    }
                }
            }
        },
        report,
    )
    .await?;
    Ok(())
}
