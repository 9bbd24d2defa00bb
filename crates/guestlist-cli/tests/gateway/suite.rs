//! The stories, each on a given store. Every one counts what reached the upstream.

use std::time::{Duration, Instant};

use crate::harness::{Answer, Gateways, Store, Target, Upstream, post};

/// One gateway on a fresh SQLite file.
pub async fn sqlite(_test: &str) -> Store {
    Store::sqlite().await
}

/// One gateway on PostgreSQL.
pub async fn postgres(test: &str) -> Store {
    Store::postgres(&guestlist_testkit::short_tag(test), 1).await
}

/// One gateway on MariaDB/MySQL.
pub async fn mysql(test: &str) -> Store {
    Store::mysql(&guestlist_testkit::short_tag(test)).await
}

/// One gateway on Redis.
pub async fn redis(test: &str) -> Store {
    Store::redis(&guestlist_testkit::short_tag(test)).await
}

/// Two gateways sharing PostgreSQL, requests alternating between them.
pub async fn shared_postgres(test: &str) -> Store {
    Store::postgres(&guestlist_testkit::short_tag(test), 2).await
}

const ALICE: (&str, &str) = ("authorization", "Bearer alice");
const BOB: (&str, &str) = ("authorization", "Bearer bob");

fn problem_type(answer: &Answer) -> String {
    assert_eq!(
        answer.content_type.as_deref(),
        Some("application/problem+json"),
        "{answer:?}"
    );
    answer.json()["type"].as_str().unwrap().to_owned()
}

pub async fn five_retries_one_execution_four_replays(store: Store) {
    let (upstream, gateway) = front(&store, &[]).await;
    let url = gateway.route("/charges?currency=eur");
    let mut answers = Vec::new();
    for _ in 0..5 {
        answers.push(
            post(
                &url,
                &[ALICE, ("idempotency-key", "k-1")],
                b"{\"amount\":1200}",
            )
            .await,
        );
    }
    assert_eq!(
        upstream.executions("/charges"),
        1,
        "five retries, one execution"
    );
    assert_eq!(answers[0].status, 201);
    assert!(!answers[0].replayed);
    for replay in &answers[1..] {
        assert!(
            replay.replayed,
            "a retry is marked Idempotent-Replayed: true"
        );
        assert_eq!(
            (replay.status, &replay.content_type, &replay.body),
            (
                answers[0].status,
                &answers[0].content_type,
                &answers[0].body
            ),
            "byte-identical"
        );
    }
    let keys = upstream.keys();
    let sent = keys[0].as_deref().unwrap();
    assert_eq!(keys.len(), 1);
    assert!(
        sent.starts_with("69:cred:") && sent.ends_with(":k-1"),
        "the key travelled upstream, named with its client's scope: {sent}"
    );
}

pub async fn fifty_concurrent_requests_one_execution(store: Store) {
    let (upstream, gateway) = front(&store, &[]).await;
    let url = gateway.route("/orders?delay_ms=300");
    let answers = burst(&url, 50).await;
    assert_eq!(
        upstream.executions("/orders"),
        1,
        "fifty at once, one execution"
    );
    let statuses: Vec<u16> = answers.iter().map(|a| a.status).collect();
    assert!(
        statuses.iter().all(|s| *s == 201 || *s == 409),
        "every answer is the run, its replay, or 409: {statuses:?}"
    );
    assert!(statuses.contains(&201));
}

pub async fn fifty_concurrent_requests_wait_for_one_answer(store: Store) {
    let (upstream, gateway) = front(&store, &["--in-flight-wait", "10s"]).await;
    let url = gateway.route("/orders?delay_ms=1000");
    let answers = burst(&url, 50).await;
    assert_eq!(upstream.executions("/orders"), 1, "one execution");
    let ran: Vec<&Answer> = answers.iter().filter(|a| !a.replayed).collect();
    assert_eq!(ran.len(), 1, "the others waited for its answer");
    for answer in &answers {
        assert_eq!(answer.status, 201, "no 409: {answer:?}");
        assert_eq!(answer.body, ran[0].body, "byte for byte");
    }
}

/// `n` POSTs with one key at once, to `target` (on every gateway in turn).
async fn burst(target: &impl Target, n: usize) -> Vec<Answer> {
    let start = std::sync::Arc::new(tokio::sync::Barrier::new(n));
    let tasks: Vec<_> = (0..n)
        .map(|_| {
            let (url, start) = (target.url(), start.clone());
            tokio::spawn(async move {
                start.wait().await;
                post(&url, &[ALICE, ("idempotency-key", "burst")], b"{}").await
            })
        })
        .collect();
    let mut answers = Vec::new();
    for task in tasks {
        answers.push(task.await.unwrap());
    }
    answers
}

pub async fn another_body_with_the_same_key_gets_422(store: Store) {
    let (upstream, gateway) = front(&store, &[]).await;
    let url = gateway.route("/charges");
    let key = ("idempotency-key", "k-2");
    assert_eq!(
        post(&url, &[ALICE, key], b"{\"amount\":1}").await.status,
        201
    );
    let reused = post(&url, &[ALICE, key], b"{\"amount\":2}").await;
    assert_eq!(reused.status, 422);
    assert!(problem_type(&reused).ends_with("#key-reused"));
    assert_eq!(upstream.executions("/charges"), 1);

    // Stripe's answer instead, when asked for.
    let stripe = Gateways::start(&upstream.url, &store, &["--mismatch-status", "400"]).await;
    let reused = post(&stripe.route("/charges"), &[ALICE, key], b"{\"amount\":3}").await;
    assert_eq!(reused.status, 400);
    assert_eq!(upstream.executions("/charges"), 1);
}

pub async fn malformed_and_missing_keys_get_400_and_reach_nothing(store: Store) {
    let (upstream, gateway) = front(&store, &["--require-key"]).await;
    let url = gateway.route("/charges");
    let long = "k".repeat(256);
    for key in ["a b", "\"open", long.as_str()] {
        let answer = post(&url, &[ALICE, ("idempotency-key", key)], b"{}").await;
        assert_eq!(answer.status, 400, "{key:?}");
        assert!(problem_type(&answer).ends_with("#key-malformed"));
        assert!(
            answer.json()["detail"]
                .as_str()
                .unwrap()
                .contains("printable ASCII")
        );
    }
    let missing = post(&url, &[ALICE], b"{}").await;
    assert_eq!(missing.status, 400);
    assert!(problem_type(&missing).ends_with("#key-required"));
    assert_eq!(
        upstream.executions("/charges"),
        0,
        "nothing reached the upstream"
    );

    // GET is not keyed: it passes through.
    let got = reqwest::get(gateway.route("/status").url()).await.unwrap();
    assert_eq!(got.status(), 201);
    assert_eq!(upstream.executions("/status"), 1);
}

pub async fn limits_and_methods_are_the_operators(store: Store) {
    let (upstream, gateway) = front(
        &store,
        &[
            "--max-body",
            "16B",
            "--methods",
            "PUT",
            "--lease",
            "2s",
            "--upstream-timeout",
            "1s",
        ],
    )
    .await;
    let put = |key: &'static str, body: &'static [u8]| {
        let url = gateway.route("/items/1").url();
        async move {
            let response = reqwest::Client::new()
                .put(url)
                .header(ALICE.0, ALICE.1)
                .header("idempotency-key", key)
                .body(body)
                .send()
                .await
                .unwrap();
            (
                response.status().as_u16(),
                response.headers().contains_key("idempotent-replayed"),
            )
        }
    };
    assert_eq!(put("k-big", b"{\"too\": \"large for 16\"}").await.0, 413);
    assert_eq!(
        upstream.executions("/items/1"),
        0,
        "an oversize body reaches nothing"
    );
    assert_eq!(put("k-put", b"{}").await, (201, false));
    assert_eq!(
        put("k-put", b"{}").await,
        (201, true),
        "PUT is keyed when asked"
    );
    assert_eq!(upstream.executions("/items/1"), 1);
    // An unkeyed request holds no key: the upstream timeout (for keyed ones) does not cut it.
    let slow_get = reqwest::get(gateway.route("/download?delay_ms=1500").url())
        .await
        .unwrap();
    assert_eq!(
        slow_get.status(),
        201,
        "a slow unkeyed GET is not cut at --upstream-timeout"
    );
    // POST is no longer keyed: both run.
    post(
        &gateway.route("/posts"),
        &[ALICE, ("idempotency-key", "k-post")],
        b"{}",
    )
    .await;
    let second = post(
        &gateway.route("/posts"),
        &[ALICE, ("idempotency-key", "k-post")],
        b"{}",
    )
    .await;
    assert!(!second.replayed);
    assert_eq!(upstream.executions("/posts"), 2);
}

pub async fn two_scopes_two_executions(store: Store) {
    let (upstream, gateway) = front(&store, &[]).await;
    let url = gateway.route("/charges");
    let key = ("idempotency-key", "same-key");
    let alice = post(&url, &[ALICE, key], b"{}").await;
    let bob = post(&url, &[BOB, key], b"{}").await;
    assert_eq!(
        upstream.executions("/charges"),
        2,
        "two clients, two operations"
    );
    assert!(!bob.replayed, "bob never gets alice's answer");
    assert_ne!(alice.json()["execution"], bob.json()["execution"]);
    assert!(post(&url, &[BOB, key], b"{}").await.replayed);
    assert_eq!(upstream.executions("/charges"), 2);

    // Scoped by a header of the operator's choosing instead.
    let tenants =
        Gateways::start(&upstream.url, &store, &["--scope-from", "header:x-tenant"]).await;
    let url = tenants.route("/tenanted");
    post(&url, &[("x-tenant", "acme"), key], b"{}").await;
    post(&url, &[("x-tenant", "acme"), key], b"{}").await;
    post(&url, &[("x-tenant", "globex"), key], b"{}").await;
    assert_eq!(upstream.executions("/tenanted"), 2);
    let unscoped = post(&url, &[key], b"{}").await;
    assert_eq!(unscoped.status, 400, "no tenant, no scope");
    assert!(
        unscoped.json()["detail"]
            .as_str()
            .unwrap()
            .contains("x-tenant")
    );
}

pub async fn webhook_keys_from_a_header(store: Store) {
    let (upstream, gateway) = front(
        &store,
        &[
            "--key-from",
            "header:X-GitHub-Delivery",
            "--scope-from",
            "none",
        ],
    )
    .await;
    let url = gateway.route("/github");
    let delivery = ("x-github-delivery", "72d3162e-cc78-11e3-81ab-4c9367dc0958");
    for _ in 0..3 {
        assert_eq!(
            post(&url, &[delivery], b"{\"action\":\"opened\"}")
                .await
                .status,
            201
        );
    }
    post(
        &url,
        &[("x-github-delivery", "another")],
        b"{\"action\":\"opened\"}",
    )
    .await;
    assert_eq!(
        upstream.executions("/github"),
        2,
        "three redeliveries of one, and another"
    );
    assert_eq!(
        upstream.keys()[0].as_deref(),
        Some(delivery.1),
        "the delivery id travels upstream as Idempotency-Key"
    );
}

pub async fn webhook_keys_from_a_json_field(store: Store) {
    let (upstream, gateway) =
        front(&store, &["--key-from", "json:/id", "--scope-from", "none"]).await;
    let url = gateway.route("/stripe");
    let event = b"{\"id\": \"evt_9f3k\", \"type\": \"charge.succeeded\"}";
    let first = post(&url, &[], event).await;
    let again = post(&url, &[], event).await;
    assert!(again.replayed);
    assert_eq!(first.body, again.body);
    post(
        &url,
        &[],
        b"{\"id\": \"evt_7h2m\", \"type\": \"charge.succeeded\"}",
    )
    .await;
    assert_eq!(upstream.executions("/stripe"), 2);
    assert_eq!(upstream.keys()[0].as_deref(), Some("evt_9f3k"));
    let not_json = post(&url, &[], b"id=evt_1").await;
    assert_eq!(not_json.status, 400);
    assert!(
        not_json.json()["detail"]
            .as_str()
            .unwrap()
            .contains("not JSON")
    );
    assert_eq!(upstream.executions("/stripe"), 2);
}

pub async fn webhook_keys_from_the_body_bytes(store: Store) {
    let (upstream, gateway) = front(
        &store,
        &["--key-from", "body-sha256", "--scope-from", "none"],
    )
    .await;
    let url = gateway.route("/hook");
    post(&url, &[], b"{\"a\":1,\"b\":2}").await;
    assert!(post(&url, &[], b"{\"a\":1,\"b\":2}").await.replayed);
    // The same JSON in other bytes is another delivery: the key is of the bytes received.
    assert!(!post(&url, &[], b"{\"b\":2,\"a\":1}").await.replayed);
    assert_eq!(upstream.executions("/hook"), 2);
    let key = upstream.keys()[0].clone().unwrap();
    assert!(key.starts_with("sha256:") && key.len() == 71, "{key}");
}

pub async fn upstream_down_502_then_a_retry_runs_once(store: Store) {
    // An address nothing listens on, yet.
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    drop(listener);
    let gateway = Gateways::start(&format!("http://{addr}"), &store, &[]).await;
    let url = gateway.route("/charges");
    let key = ("idempotency-key", "k-down");
    let down = post(&url, &[ALICE, key], b"{}").await;
    assert_eq!(down.status, 502);
    assert!(problem_type(&down).ends_with("#upstream-unreachable"));

    let upstream = Upstream::on(tokio::net::TcpListener::bind(addr).await.unwrap()).await;
    let retry = post(&url, &[ALICE, key], b"{}").await;
    assert_eq!(retry.status, 201, "the key was released: the retry runs");
    assert!(post(&url, &[ALICE, key], b"{}").await.replayed);
    assert_eq!(upstream.executions("/charges"), 1);
}

pub async fn upstream_timeout_keeps_the_key_until_the_lease_ends(store: Store) {
    let (upstream, gateway) = front(&store, &["--lease", "3s", "--upstream-timeout", "1s"]).await;
    // The first execution outlasts the upstream timeout; a later one answers at once.
    let url = gateway.route("/slow?first_delay_ms=1500");
    let key = ("idempotency-key", "k-slow");
    let timed_out = post(&url, &[ALICE, key], b"{}").await;
    assert_eq!(timed_out.status, 504);
    assert!(problem_type(&timed_out).ends_with("#upstream-timeout"));
    let early = post(&url, &[ALICE, key], b"{}").await;
    assert_eq!(
        early.status, 409,
        "the first may still run upstream: no second copy"
    );
    assert_eq!(upstream.executions("/slow"), 1);
    let late = after_the_lease(&url, &[ALICE, key]).await;
    assert_eq!(late.status, 201, "after the lease, the retry runs");
    assert_eq!(
        upstream.executions("/slow"),
        2,
        "once more, never a third time"
    );
    assert!(post(&url, &[ALICE, key], b"{}").await.replayed);
}

pub async fn a_dropped_response_keeps_the_key_until_the_lease_ends(store: Store) {
    let (upstream, gateway) = front(&store, &["--lease", "2s", "--upstream-timeout", "1s"]).await;
    let url = gateway.route("/drop");
    let key = ("idempotency-key", "k-drop");
    let broken = post(&url, &[ALICE, key], b"{}").await;
    assert!(
        broken.status >= 500,
        "the client learns it broke: {broken:?}"
    );
    assert_eq!(post(&url, &[ALICE, key], b"{}").await.status, 409);
    assert_eq!(upstream.executions("/drop"), 1);
    after_the_lease(&url, &[ALICE, key]).await;
    assert_eq!(
        upstream.executions("/drop"),
        2,
        "one take-over after the lease"
    );
}

pub async fn an_upstream_500_keeps_the_key_a_503_releases_it(store: Store) {
    let (upstream, gateway) = front(&store, &["--lease", "2s", "--upstream-timeout", "1s"]).await;
    // A 500 may come after the work began: no retry until the lease ends, then one.
    let failing = gateway.route("/failing?first_status=500");
    let key = ("idempotency-key", "k-500");
    assert_eq!(post(&failing, &[ALICE, key], b"{}").await.status, 500);
    assert_eq!(post(&failing, &[ALICE, key], b"{}").await.status, 409);
    assert_eq!(after_the_lease(&failing, &[ALICE, key]).await.status, 201);
    assert_eq!(upstream.executions("/failing"), 2);

    // A 503 says it did not run: the key is released and the retry runs at once.
    let busy = gateway.route("/busy?first_status=503");
    let key = ("idempotency-key", "k-503");
    assert_eq!(post(&busy, &[ALICE, key], b"{}").await.status, 503);
    assert_eq!(post(&busy, &[ALICE, key], b"{}").await.status, 201);
    assert_eq!(upstream.executions("/busy"), 2);
}

pub async fn gateway_killed_mid_request_409_then_one_run_after_the_lease(store: Store) {
    let flags = ["--lease", "6s", "--upstream-timeout", "4s"];
    let (upstream, mut gateway) = front(&store, &flags).await;
    let key = ("idempotency-key", "k-kill");
    let started = Instant::now();
    // The first attempt goes through the first gateway, the one about to be killed.
    let first = tokio::spawn({
        let url = gateway.everywhere("/slow-charge?delay_ms=2000").remove(0);
        async move {
            reqwest::Client::new()
                .post(url)
                .header(ALICE.0, ALICE.1)
                .header(key.0, key.1)
                .body("{}")
                .send()
                .await
        }
    });
    upstream.reached("/slow-charge").await;
    gateway.kill_and_restart_first(&store).await;
    assert!(
        first.await.unwrap().is_err(),
        "the client lost its connection"
    );

    // Retries go to the restarted gateway (and, where two share the store, to the other).
    let url = gateway.route("/slow-charge?delay_ms=2000");
    for _ in 0..gateway_count(&store) {
        let early = post(&url, &[ALICE, key], b"{}").await;
        assert_eq!(
            early.status, 409,
            "before the lease ends: the first may still run"
        );
    }
    assert!(
        started.elapsed() < Duration::from_secs(6),
        "the 409s came inside the lease"
    );
    let late = after_the_lease(&url, &[ALICE, key]).await;
    assert_eq!(late.status, 201, "after the lease, the retry is forwarded");
    assert!(
        started.elapsed() >= Duration::from_secs(5),
        "not before the lease ended"
    );
    assert!(post(&url, &[ALICE, key], b"{}").await.replayed);
    assert_eq!(
        upstream.executions("/slow-charge"),
        2,
        "the killed attempt, and one forwarded after its lease"
    );
}

pub async fn sigterm_finishes_the_request_in_flight(store: Store) {
    let (upstream, gateway) = front(&store, &[]).await;
    let first = gateway.everywhere("").remove(0);
    let waiting = format!("{first}/slow-order?delay_ms=500");
    let in_flight = tokio::spawn(async move {
        post(&waiting, &[ALICE, ("idempotency-key", "k-term")], b"{}").await
    });
    // A client that hangs up mid-request: its attempt still runs to the end and is stored.
    let hung_up = format!("{first}/slow-hangup?delay_ms=2500");
    let gone = tokio::spawn(async move {
        post(&hung_up, &[ALICE, ("idempotency-key", "k-gone")], b"{}").await
    });
    upstream.reached("/slow-order").await;
    upstream.reached("/slow-hangup").await;
    gone.abort();
    assert!(gateway.sigterm_all().await, "a clean exit on SIGTERM");
    let answer = in_flight.await.unwrap();
    assert_eq!(
        answer.status, 201,
        "the request in flight finished: {answer:?}"
    );

    // Both answers were stored before the gateway stopped: a new gateway replays them.
    let again = Gateways::start(&upstream.url, &store, &[]).await;
    for (path, key) in [
        ("/slow-order?delay_ms=500", "k-term"),
        ("/slow-hangup?delay_ms=2500", "k-gone"),
    ] {
        let replay = post(
            &again.route(path),
            &[ALICE, ("idempotency-key", key)],
            b"{}",
        )
        .await;
        assert!(
            replay.replayed,
            "{key} was stored before the exit: {replay:?}"
        );
    }
    assert_eq!(upstream.executions("/slow-order"), 1);
    assert_eq!(upstream.executions("/slow-hangup"), 1);
}

pub async fn metrics_and_health_on_their_own_address(store: Store) {
    // The upstream must outlive the requests: bound, though not read.
    let (_upstream, gateway) = front(&store, &["--metrics-listen", "127.0.0.1:0"]).await;
    let ops = gateway
        .ops()
        .expect("the gateway printed its metrics address");
    // Both to the gateway whose metrics are read.
    let url = gateway.everywhere("/charges").remove(0);
    post(&url, &[ALICE, ("idempotency-key", "k-m")], b"{}").await;
    post(&url, &[ALICE, ("idempotency-key", "k-m")], b"{}").await;
    let health = reqwest::get(format!("{ops}/healthz")).await.unwrap();
    assert_eq!(health.status(), 200);
    let metrics = reqwest::get(format!("{ops}/metrics"))
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    for line in [
        "guestlist_http_requests_total{outcome=\"fresh\"} 1",
        "guestlist_http_requests_total{outcome=\"replayed\"} 1",
    ] {
        assert!(metrics.contains(line), "{line} in\n{metrics}");
    }
    // The upstream's own /metrics is not shadowed.
    assert_eq!(
        reqwest::get(gateway.route("/metrics").url())
            .await
            .unwrap()
            .status(),
        201
    );
}

/// An upstream that counts executions, and the store's gateways in front of it with `flags`.
async fn front(store: &Store, flags: &[&str]) -> (Upstream, Gateways) {
    let upstream = Upstream::start().await;
    let gateways = Gateways::start(&upstream.url, store, flags).await;
    (upstream, gateways)
}

/// Retries until the key's lease has ended and a retry takes over (until then: 409); the
/// answer of the one that did.
async fn after_the_lease(target: &impl Target, headers: &[(&str, &str)]) -> Answer {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let answer = post(target, headers, b"{}").await;
        if answer.status != 409 {
            return answer;
        }
        assert!(
            Instant::now() < deadline,
            "the key stayed locked past its lease"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// Runs `guestlist` with `args` on `store`; its exit status and standard output.
async fn operator(store: &Store, args: &[&str]) -> (bool, String) {
    let output = tokio::process::Command::new(env!("CARGO_BIN_EXE_guestlist"))
        .args(args)
        .args(store.args())
        .env_remove("GUESTLIST_DATABASE_URL")
        .output()
        .await
        .unwrap();
    let stdout = String::from_utf8_lossy(&output.stdout).into_owned();
    let stderr = String::from_utf8_lossy(&output.stderr);
    (output.status.success(), format!("{stdout}{stderr}"))
}

/// Runs `guestlist keys <verb>` on `key` in the scope of `Bearer <who>`.
async fn keys(store: &Store, verb: &str, who: &str, key: &str) -> (bool, String) {
    let bearer = format!("Bearer {who}");
    operator(
        store,
        &["keys", verb, "--authorization", &bearer, "--key", key],
    )
    .await
}

pub async fn operators_inspect_evict_and_count_keys(store: Store) {
    // A short memory, so that the story sees its window end: the gateway that replayed k-op
    // replays it from memory for --replay-cache-ttl after the eviction.
    let (upstream, gateway) = front(&store, &["--replay-cache-ttl", "3s"]).await;
    let url = gateway.route("/charges");
    post(&url, &[ALICE, ("idempotency-key", "k-op")], b"{}").await;

    let (found, out) = keys(&store, "inspect", "alice", "k-op").await;
    assert!(found, "{out}");
    assert!(
        out.contains("key k-op in scope cred:") && out.contains("stored: status 201"),
        "{out}"
    );
    let (_, bob) = keys(&store, "inspect", "bob", "k-op").await;
    assert!(
        bob.contains("no key k-op"),
        "bob's scope has no such key: {bob}"
    );

    // A request in flight shows as such.
    let slow = gateway.route("/slow-op?delay_ms=4000").url();
    let in_flight = tokio::spawn(async move {
        post(&slow, &[ALICE, ("idempotency-key", "k-slow-op")], b"{}").await
    });
    upstream.reached("/slow-op").await;
    let (_, stats) = operator(&store, &["stats"]).await;
    assert!(
        stats.contains("rows       2") && stats.contains("in flight  1"),
        "{stats}"
    );
    let (_, slow_key) = keys(&store, "inspect", "alice", "k-slow-op").await;
    assert!(slow_key.contains("in flight, lease ends in"), "{slow_key}");
    let (listed, held) = operator(&store, &["keys", "held"]).await;
    if matches!(store, Store::Redis { .. }) {
        assert!(!listed && held.contains("Redis cannot list"), "{held}");
    } else {
        assert!(listed, "{held}");
        assert!(
            held.contains("key k-slow-op in scope cred:")
                && held.contains("in flight, lease ends in")
                && !held.contains("key k-op "),
            "the key in flight, not the stored one: {held}"
        );
    }
    let (evicted, refused) = keys(&store, "evict", "alice", "k-slow-op").await;
    assert!(
        !evicted && refused.contains("--force"),
        "a running key is not evicted: {refused}"
    );
    in_flight.await.unwrap();

    // A retry, its memory of k-op over by now (the slow request took 4 s): replayed from the
    // store, and remembered again.
    let retry = post(&url, &[ALICE, ("idempotency-key", "k-op")], b"{}").await;
    assert!(retry.replayed);
    let (removed, out) = keys(&store, "evict", "alice", "k-op").await;
    assert!(
        removed && out.contains("removed key k-op") && out.contains("runs again"),
        "{out}"
    );
    let remembered = post(&url, &[ALICE, ("idempotency-key", "k-op")], b"{}").await;
    if gateway_count(&store) == 1 {
        assert!(
            remembered.replayed && upstream.executions("/charges") == 1,
            "within --replay-cache-ttl of its last replay, the gateway replays the key from memory"
        );
    }
    if remembered.replayed {
        tokio::time::sleep(std::time::Duration::from_millis(3200)).await;
        let again = post(&url, &[ALICE, ("idempotency-key", "k-op")], b"{}").await;
        assert!(
            !again.replayed,
            "evicted, and past the window: the next request ran again"
        );
    }
    // Otherwise another gateway, which did not remember the key, ran it again at once.
    assert_eq!(upstream.executions("/charges"), 2);
    let (found, out) = operator(
        &store,
        &["keys", "inspect", "--scope", "nobody", "--key", "k-op"],
    )
    .await;
    assert!(
        !found && out.contains("never used, evicted, or purged"),
        "{out}"
    );
}

fn gateway_count(store: &Store) -> usize {
    store.gateways()
}

pub async fn blank_or_doubled_credentials_share_no_scope(store: Store) {
    let (upstream, gateway) = front(&store, &[]).await;
    let url = gateway.route("/profile");
    let key = ("idempotency-key", "k-blank");
    // Two clients told apart upstream only by their cookies, each with a blank Authorization:
    // scoped by the blank value, the second would get the first one's answer.
    for (authorization, cookie) in [("", "session=alice"), ("  ", "session=bob")] {
        let answer = post(
            &url,
            &[("authorization", authorization), ("cookie", cookie), key],
            b"{}",
        )
        .await;
        assert_eq!(answer.status, 400, "blank credentials: {authorization:?}");
        assert!(!answer.replayed);
    }
    let doubled = post(
        &url,
        &[ALICE, ("authorization", "Bearer mallory"), key],
        b"{}",
    )
    .await;
    assert_eq!(doubled.status, 400, "two Authorization headers");
    assert_eq!(
        upstream.executions("/profile"),
        0,
        "nothing reached the upstream"
    );

    // The scheme is case-insensitive: one client, one scope.
    let first = post(&url, &[("authorization", "Bearer carol"), key], b"{}").await;
    let again = post(&url, &[("authorization", "bearer  carol"), key], b"{}").await;
    assert_eq!((first.status, again.replayed), (201, true));
    assert_eq!(upstream.executions("/profile"), 1);

    // Scoped by a header: a blank one is refused too.
    let tenants =
        Gateways::start(&upstream.url, &store, &["--scope-from", "header:x-tenant"]).await;
    let blank = post(
        &tenants.route("/tenanted"),
        &[("x-tenant", " "), key],
        b"{}",
    )
    .await;
    assert_eq!(blank.status, 400, "a blank tenant is no tenant");
}

pub async fn scoped_keys_stay_apart_and_parse_upstream(store: Store) {
    let upstream = Upstream::start().await;
    let tenants =
        Gateways::start(&upstream.url, &store, &["--scope-from", "header:x-tenant"]).await;
    let url = tenants.route("/charges");
    // Tenant a with key b:c, tenant a:b with key c: `scope:key` would be a:b:c for both.
    let a = post(
        &url,
        &[("x-tenant", "a"), ("idempotency-key", "b:c")],
        b"{}",
    )
    .await;
    let ab = post(
        &url,
        &[("x-tenant", "a:b"), ("idempotency-key", "c")],
        b"{}",
    )
    .await;
    assert_eq!((a.status, ab.status), (201, 201));
    let keys = upstream.keys();
    assert_ne!(keys[0], keys[1], "two tenants, two keys upstream: {keys:?}");

    // A second guestlist hop behind: every key the first accepts, the second parses back to the
    // same key (a quoted key with a space, a quote or a backslash is forwarded quoted).
    let behind = Store::sqlite().await;
    let second = Gateways::start(&upstream.url, &behind, &["--scope-from", "none"]).await;
    let first = Gateways::start(&second.everywhere("")[0], &store, &[]).await;
    let url = first.route("/quoted");
    for key in [r#""a b""#, r#""a\"b""#, r#""a\\b""#] {
        let answer = post(&url, &[ALICE, ("idempotency-key", key)], b"{}").await;
        assert_eq!(
            answer.status,
            201,
            "{key}: {}",
            String::from_utf8_lossy(&answer.body)
        );
        let again = post(&url, &[ALICE, ("idempotency-key", key)], b"{}").await;
        assert!(again.replayed, "{key}");
    }
    assert_eq!(
        upstream.executions("/quoted"),
        3,
        "one run per key, none refused"
    );
}

pub async fn connect_and_options_star_are_answered_here(store: Store) {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    let (upstream, gateway) = front(&store, &[]).await;
    let addr = gateway.everywhere("")[0]
        .trim_start_matches("http://")
        .to_owned();
    for (request, status) in [
        (
            "CONNECT example.com:443 HTTP/1.1\r\nhost: example.com:443\r\n\r\n",
            "405",
        ),
        ("OPTIONS * HTTP/1.1\r\nhost: gateway\r\n\r\n", "204"),
    ] {
        let mut socket = tokio::net::TcpStream::connect(&addr).await.unwrap();
        socket.write_all(request.as_bytes()).await.unwrap();
        let mut head = [0u8; 12];
        socket
            .read_exact(&mut head)
            .await
            .expect("an answer, not a dropped connection");
        assert_eq!(
            String::from_utf8_lossy(&head),
            format!("HTTP/1.1 {status}"),
            "{request:?}"
        );
    }
    assert_eq!(upstream.keys().len(), 0, "nothing reached the upstream");
}
