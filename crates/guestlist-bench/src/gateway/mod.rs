//! `guestlist-bench gateway`: the `guestlist gateway` binary in front of a small upstream,
//! against the upstream alone and nginx as a plain reverse proxy, in one run.
//!
//! Four figures, interleaved round by round (odd rounds reversed): `direct` (the load generator
//! to the upstream), `nginx` (Debian's nginx, `proxy_pass` with keep-alive to the upstream),
//! `fresh` (the gateway with a new key on every request: its claim, the proxied call, the stored
//! response) and `replay` (the gateway answering retries of stored keys without the upstream).
//! The load generator runs in this process: 32 keep-alive connections in a closed loop. The
//! gateway runs on the given database and on SQLite.

mod nginx;
mod process;

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
}

impl Figure {
    const ALL: [Figure; 4] = [Figure::Direct, Figure::Nginx, Figure::Fresh, Figure::Replay];
}

impl requests::Figure for Figure {
    fn name(self) -> &'static str {
        match self {
            Figure::Direct => "direct",
            Figure::Nginx => "nginx",
            Figure::Fresh => "gateway_fresh",
            Figure::Replay => "gateway_replay",
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
    let plan = Plan::new(common.quick);
    let mut report = Report::default();
    let upstream = upstream().await?;
    let nginx = nginx::Nginx::start(&upstream).await?;
    let scratch = tempfile::tempdir()?;
    let mut databases = vec![(label(&common.database)?, common.database.clone())];
    if !common.database.starts_with("sqlite:") {
        let sqlite = format!(
            "sqlite:{}",
            scratch.path().join("bench-gateway.db").display()
        );
        databases.push(("sqlite", sqlite));
    }
    let client = reqwest::Client::builder()
        .pool_max_idle_per_host(CONNECTIONS)
        .build()?;
    for (backend, database) in databases {
        eprintln!("measuring the gateway on {backend} …");
        let gateway = process::Gateway::start(&upstream, &database, scratch.path()).await?;
        let targets = Targets {
            direct: format!("{upstream}/v1/charges"),
            nginx: format!("{}/v1/charges", nginx.url),
            gateway: format!("{}/v1/charges", gateway.url),
        };
        for n in 0..STORED_KEYS {
            send(&client, &targets.gateway, Some(&format!("stored-{n}"))).await?;
        }
        measure(&client, &targets, plan, backend, &mut report).await?;
        let table = gateway.table.clone();
        drop(gateway);
        drop_table(&database, &table).await?;
        for (name, over, under) in [
            ("fresh_vs_nginx", "gateway_fresh", "nginx"),
            ("replay_vs_nginx", "gateway_replay", "nginx"),
            ("nginx_vs_direct", "nginx", "direct"),
        ] {
            report.ratio(name, over, under, backend, CONNECTIONS);
        }
    }
    drop(nginx);
    Ok(report)
}

/// Drops the key table a gateway made, so that runs do not pile tables up in a shared database
/// (SQLite's file goes with the scratch directory).
async fn drop_table(database: &str, table: &str) -> anyhow::Result<()> {
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
        _ => {}
    }
    Ok(())
}

fn label(url: &str) -> anyhow::Result<&'static str> {
    Ok(match url.split(':').next().unwrap_or_default() {
        "postgres" | "postgresql" => "postgres",
        "mysql" | "mariadb" => "mysql",
        "sqlite" => "sqlite",
        _ => anyhow::bail!(
            "cannot tell the database from {url:?}: use postgres://, mysql:// or sqlite:"
        ),
    })
}

/// Where each figure sends its requests.
#[derive(Debug, Clone)]
struct Targets {
    direct: String,
    nginx: String,
    gateway: String,
}

async fn measure(
    client: &reqwest::Client,
    targets: &Targets,
    plan: Plan,
    backend: &'static str,
    report: &mut Report,
) -> anyhow::Result<()> {
    let (client, targets) = (client.clone(), targets.clone());
    let rows = requests::measure(
        plan,
        &Figure::ALL,
        backend,
        move |figure, round, worker, n| {
            let (client, targets) = (client.clone(), targets.clone());
            async move {
                match figure {
                    Figure::Direct => send(&client, &targets.direct, None).await,
                    Figure::Nginx => send(&client, &targets.nginx, None).await,
                    Figure::Fresh => {
                        let key = format!("{backend}-r{round}-w{worker}-{n}");
                        send(&client, &targets.gateway, Some(&key)).await
                    }
                    Figure::Replay => {
                        send(&client, &targets.gateway, Some(&stored_key(worker, n))).await
                    }
                }
            }
        },
    )
    .await?;
    report.rows.extend(rows);
    Ok(())
}
