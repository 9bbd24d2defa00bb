//! What ships under `deploy/`: the Prometheus alert rules (promtool's own tests of them, and one
//! end to end: a real Prometheus scrapes a real relay, the broker is cut, the alert fires, the
//! broker comes back, it resolves) and the Grafana dashboard (every query names a metric the
//! programs export, and every metric they export is on it; nothing here runs Grafana).

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use guestlist_testkit::fault_proxy::FaultProxy;
use serde_json::Value;

use super::{nats_url, outbox_written_by_another_language, spawn_relay};

/// The repository's root.
fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// promtool, from Debian's `prometheus` (scripts/services.sh's ensure_prometheus).
fn promtool(args: &[&str]) -> std::process::Output {
    Command::new("promtool")
        .args(args)
        .current_dir(root().join("deploy/prometheus"))
        .output()
        .expect("promtool is missing: run `source scripts/services.sh && ensure_prometheus`")
}

#[test]
fn the_alert_rules_are_valid_and_pass_their_tests() {
    for args in [
        &["check", "rules", "guestlist-alerts.yml"][..],
        &["test", "rules", "guestlist-alerts.test.yml"],
    ] {
        let out = promtool(args);
        assert!(
            out.status.success(),
            "promtool {args:?}:\n{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
    }
}

/// The metric names the workspace's code records (`counter!`, `gauge!`, `histogram!` with a
/// literal name), and every series name Prometheus gets of them (a histogram's `_sum` and
/// `_count` too, and `_bucket` where the exporter has buckets).
fn exported() -> (BTreeSet<String>, BTreeSet<String>) {
    let recorded =
        regex_lite::Regex::new(r#"(counter|gauge|histogram)!\(\s*"(guestlist_[a-z_]+)""#).unwrap();
    let (mut recorded_names, mut names) = (BTreeSet::new(), BTreeSet::new());
    let mut files = vec![root().join("crates")];
    while let Some(path) = files.pop() {
        if path.is_dir() {
            files.extend(std::fs::read_dir(&path).unwrap().map(|e| e.unwrap().path()));
            continue;
        }
        let in_src = path.components().any(|c| c.as_os_str() == "src");
        if !in_src || path.extension().is_none_or(|e| e != "rs") {
            continue;
        }
        let code = std::fs::read_to_string(&path).unwrap();
        for found in recorded.captures_iter(&code) {
            let name = found[2].to_owned();
            if &found[1] == "histogram" {
                for suffix in ["_sum", "_count", "_bucket"] {
                    names.insert(format!("{name}{suffix}"));
                }
            }
            recorded_names.insert(name.clone());
            names.insert(name);
        }
    }
    (recorded_names, names)
}

/// The `guestlist_…` names in `text`.
fn named_in(text: &str) -> BTreeSet<String> {
    regex_lite::Regex::new(r"guestlist_[a-z_]+")
        .unwrap()
        .find_iter(text)
        .map(|m| m.as_str().to_owned())
        .collect()
}

#[test]
fn the_rules_and_the_dashboard_name_only_exported_metrics_and_the_dashboard_shows_them_all() {
    let (recorded, exported) = exported();
    assert!(
        recorded.len() > 15,
        "the scan finds the metrics: {recorded:?}"
    );
    let rules =
        std::fs::read_to_string(root().join("deploy/prometheus/guestlist-alerts.yml")).unwrap();
    let dashboard: Value = serde_json::from_str(
        &std::fs::read_to_string(root().join("deploy/grafana/guestlist.json")).unwrap(),
    )
    .unwrap();
    let mut queries = Vec::new();
    for panel in dashboard["panels"].as_array().unwrap() {
        for target in panel["targets"].as_array().into_iter().flatten() {
            queries.push(target["expr"].as_str().unwrap().to_owned());
        }
    }
    assert!(queries.len() >= 15, "{queries:?}");
    let shown = named_in(&queries.join("\n"));
    for (what, names) in [
        ("the alert rules", named_in(&rules)),
        ("the dashboard", shown.clone()),
    ] {
        let unknown: Vec<&String> = names.difference(&exported).collect();
        assert!(
            unknown.is_empty(),
            "{what} name metrics nothing exports: {unknown:?}"
        );
    }
    let missing: Vec<&String> = recorded
        .iter()
        .filter(|name| {
            !["", "_sum", "_count"]
                .iter()
                .any(|suffix| shown.contains(&format!("{name}{suffix}")))
        })
        .collect();
    assert!(
        missing.is_empty(),
        "metrics the dashboard does not show: {missing:?}"
    );
}

/// A free port on loopback.
fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// The alerts Prometheus at `base` has, as (name, state).
async fn alerts(http: &reqwest::Client, base: &str) -> Vec<(String, String)> {
    let Ok(answer) = http.get(format!("{base}/api/v1/alerts")).send().await else {
        return Vec::new();
    };
    let body: Value = answer.json().await.unwrap_or_default();
    body["data"]["alerts"]
        .as_array()
        .into_iter()
        .flatten()
        .map(|a| {
            (
                a["labels"]["alertname"]
                    .as_str()
                    .unwrap_or_default()
                    .to_owned(),
                a["state"].as_str().unwrap_or_default().to_owned(),
            )
        })
        .collect()
}

/// Waits (a minute at most) until `done` holds for the alerts at `base`.
async fn until_alerts(
    http: &reqwest::Client,
    base: &str,
    what: &str,
    done: impl Fn(&[(String, String)]) -> bool,
) {
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let now = alerts(http, base).await;
        if done(&now) {
            return;
        }
        assert!(Instant::now() < deadline, "{what}: the alerts are {now:?}");
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
}

/// A real Prometheus scrapes a real relay every second, with the shipped rules (their `for`
/// shortened to two seconds): the broker is cut and a message waits, `GuestlistRelayOutage`
/// fires; the broker comes back, the message is published and the alert resolves.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn prometheus_fires_the_relay_outage_alert_while_the_broker_is_cut_and_resolves_it() {
    let nats = async_nats::connect(nats_url()).await.expect("NATS runs");
    let jetstream = async_nats::jetstream::new(nats);
    let _ = jetstream.delete_stream("GL_CLI_PROM").await;
    let mut stream = jetstream
        .create_stream(async_nats::jetstream::stream::Config {
            name: "GL_CLI_PROM".to_owned(),
            subjects: vec!["cli.prom.orders".to_owned()],
            ..Default::default()
        })
        .await
        .unwrap();
    let dir = tempfile::tempdir().unwrap();
    let url = outbox_written_by_another_language(&dir, "evt_prom", "cli.prom.orders").await;
    let (proxy, through) = FaultProxy::for_url(&nats_url()).await;
    let metrics = format!("127.0.0.1:{}", free_port());
    let _relay = Relay(spawn_relay(
        &url,
        &[
            "--nats",
            &through,
            "--metrics-listen",
            &metrics,
            "--confirm-timeout",
            "2s",
        ],
    ));
    let mut stored = async || stream.info().await.unwrap().state.messages;
    let deadline = Instant::now() + Duration::from_secs(30);
    while stored().await < 3 {
        assert!(
            Instant::now() < deadline,
            "the relay publishes the first three"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }

    let rules = std::fs::read_to_string(root().join("deploy/prometheus/guestlist-alerts.yml"))
        .unwrap()
        .replace("for: 1m", "for: 2s")
        .replace("for: 2m", "for: 2s")
        .replace("for: 5m", "for: 2s");
    std::fs::write(dir.path().join("rules.yml"), rules).unwrap();
    let config = format!(
        "global: {{scrape_interval: 1s, evaluation_interval: 1s}}\n\
         rule_files: [rules.yml]\n\
         scrape_configs:\n  - job_name: relay\n    static_configs: [{{targets: ['{metrics}']}}]\n"
    );
    std::fs::write(dir.path().join("prometheus.yml"), config).unwrap();
    let web = format!("127.0.0.1:{}", free_port());
    let _prometheus = Relay(
        Command::new("prometheus")
            .arg(format!(
                "--config.file={}",
                dir.path().join("prometheus.yml").display()
            ))
            .arg(format!(
                "--storage.tsdb.path={}",
                dir.path().join("tsdb").display()
            ))
            .arg(format!("--web.listen-address={web}"))
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("prometheus is missing: run `source scripts/services.sh && ensure_prometheus`"),
    );
    let base = format!("http://{web}");
    let http = reqwest::Client::new();
    let scraped = Instant::now() + Duration::from_secs(60);
    loop {
        let query = http
            .get(format!(
                "{base}/api/v1/query?query=up%7Bjob%3D%22relay%22%7D%3D%3D1"
            ))
            .send()
            .await;
        let found = match query {
            Ok(answer) => answer.json::<Value>().await.unwrap_or_default(),
            Err(_) => Value::Null,
        };
        if found["data"]["result"]
            .as_array()
            .is_some_and(|r| !r.is_empty())
        {
            break;
        }
        assert!(
            Instant::now() < scraped,
            "Prometheus scrapes the relay: {found}"
        );
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
    assert!(
        alerts(&http, &base).await.is_empty(),
        "no alert while all is well"
    );

    proxy.cut();
    // One more message waits: the relay tries it, the broker is out of reach.
    let pool = guestlist::sqlx::SqlitePool::connect_with(guestlist::sqlite_options(&url).unwrap())
        .await
        .unwrap();
    guestlist::sqlx::raw_sql(
        "INSERT INTO guestlist_outbox (message_id, topic, seq, payload) \
         VALUES ('evt_prom_late', 'cli.prom.orders', 0, '{}')",
    )
    .execute(&pool)
    .await
    .unwrap();
    until_alerts(&http, &base, "the relay's outage fires", |now| {
        now.iter()
            .any(|(name, state)| name == "GuestlistRelayOutage" && state == "firing")
    })
    .await;

    proxy.mend();
    until_alerts(&http, &base, "the relay's outage resolves", |now| {
        !now.iter().any(|(name, _)| name == "GuestlistRelayOutage")
    })
    .await;
    assert_eq!(stored().await, 4, "the message that waited is published");
}

/// A child process killed with the story.
struct Relay(std::process::Child);

impl Drop for Relay {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}
