//! The stories every key store must tell the same way. Each counts executions and rows.

use std::sync::Arc;
use std::time::Duration;

use reqwest::StatusCode;

use super::app::AppState;
use super::client::{Answer, Call, Server};
use super::crash::ChildServer;
use super::stores::{Settings, Store};

/// A test's store, state and server.
struct Api<S: Store> {
    store: S,
    state: AppState,
    server: Server,
}

impl<S: Store> Api<S> {
    async fn start(name: &str, settings: Settings) -> Self {
        let store = S::open(name).await;
        let state = AppState::default();
        let server = Server::start(store.router(state.clone(), &settings)).await;
        Self {
            store,
            state,
            server,
        }
    }

    async fn send(&self, call: &Call) -> Answer {
        call.send(&self.server.base).await
    }

    fn executions(&self) -> u64 {
        self.state.executions()
    }

    async fn effects(&self) -> u64 {
        self.store.effects(&self.state).await
    }

    /// Sends `call` held at the gate `gate`, and returns once its handler has arrived there.
    async fn held(self: &Arc<Self>, call: &Call, gate: &str) -> tokio::task::JoinHandle<Answer> {
        let entered = self.state.gate(gate).entered;
        let (api, call) = (self.clone(), call.clone().header("x-test-block", gate));
        let answer = tokio::spawn(async move { api.send(&call).await });
        entered.notified().await;
        answer
    }
}

pub async fn five_identical_retries_run_the_handler_once<S: Store>(name: &str) {
    let api = Api::<S>::start(name, Settings::default()).await;
    let call = Call::new("5f1d2c3a-retry-five");
    let mut answers = Vec::new();
    for _ in 0..5 {
        answers.push(api.send(&call).await);
    }
    assert_eq!(api.executions(), 1, "the handler ran once");
    assert_eq!(api.effects().await, 1, "one payment exists");
    let first = &answers[0];
    assert_eq!(first.status, StatusCode::CREATED);
    assert!(!first.replayed());
    assert!(
        first.text().contains(":5f1d2c3a-retry-five/charge\""),
        "the handler had the client's key to carry downstream: {}",
        first.text()
    );
    assert_eq!(first.header("x-not-stored"), Some("1"));
    for again in &answers[1..] {
        assert_eq!(again.status, first.status);
        assert_eq!(again.body, first.body, "byte for byte");
        assert_eq!(again.header("content-type"), first.header("content-type"));
        assert_eq!(again.header("location"), first.header("location"));
        assert!(again.replayed(), "marked Idempotent-Replayed");
        assert_eq!(
            again.header("x-not-stored"),
            None,
            "headers off the allow-list are not replayed"
        );
    }
}

pub async fn thirty_two_concurrent_requests_run_the_handler_once<S: Store>(name: &str) {
    let api = Arc::new(Api::<S>::start(name, Settings::default()).await);
    let call = Call::new("concurrent-32").header("x-test-delay-ms", "300");
    let requests: Vec<_> = (0..32)
        .map(|_| {
            let (api, call) = (api.clone(), call.clone());
            tokio::spawn(async move { api.send(&call).await })
        })
        .collect();
    let mut ran = 0;
    for request in requests {
        let answer = request.await.unwrap();
        match answer.status {
            StatusCode::CREATED if !answer.replayed() => ran += 1,
            StatusCode::CREATED => {}
            StatusCode::CONFLICT => {
                assert_eq!(answer.problem().as_deref(), Some("key-in-flight"));
                assert!(
                    answer.header("retry-after").is_some(),
                    "409 says when to retry"
                );
            }
            other => panic!("unexpected {other}: {}", answer.text()),
        }
    }
    assert_eq!(ran, 1, "exactly one request ran the handler");
    assert_eq!(api.executions(), 1);
    assert_eq!(api.effects().await, 1);
}

pub async fn concurrent_retries_of_a_finished_request_all_replay<S: Store>(name: &str) {
    let api = Arc::new(Api::<S>::start(name, Settings::default()).await);
    let call = Call::new("finished-then-32");
    let first = api.send(&call).await;
    assert_eq!(first.status, StatusCode::CREATED, "{}", first.text());
    // Rounds of 32 at once, so that retries meet each other inside the store.
    for _ in 0..5 {
        let retries: Vec<_> = (0..32)
            .map(|_| {
                let (api, call) = (api.clone(), call.clone());
                tokio::spawn(async move { api.send(&call).await })
            })
            .collect();
        for retry in retries {
            let answer = retry.await.unwrap();
            assert_eq!(answer.status, StatusCode::CREATED, "{}", answer.text());
            assert!(
                answer.replayed(),
                "a finished request is replayed, never 409"
            );
            assert_eq!(answer.body, first.body);
        }
    }
    assert_eq!(api.executions(), 1);
}

pub async fn the_same_key_with_another_body_is_422<S: Store>(name: &str) {
    let api = Api::<S>::start(name, Settings::default()).await;
    let first = api.send(&Call::new("reused")).await;
    assert_eq!(first.status, StatusCode::CREATED);
    let other = api
        .send(&Call::new("reused").body(br#"{"amount":101}"#))
        .await;
    assert_eq!(other.status, StatusCode::UNPROCESSABLE_ENTITY);
    assert_eq!(other.problem().as_deref(), Some("key-reused"));
    assert!(other.text().contains("use a new key"), "{}", other.text());
    assert_eq!(api.executions(), 1);
}

pub async fn the_same_key_from_two_clients_runs_twice_without_cross_replay<S: Store>(name: &str) {
    let api = Api::<S>::start(name, Settings::default()).await;
    let alice = Call::new("shared-key").by(Some("Bearer alice"));
    let bob = Call::new("shared-key").by(Some("Bearer bob"));
    let alice_first = api.send(&alice).await;
    let bob_first = api.send(&bob).await;
    assert!(!bob_first.replayed(), "bob's request is his own");
    assert_ne!(alice_first.body, bob_first.body, "two payments");
    let alice_again = api.send(&alice).await;
    let bob_again = api.send(&bob).await;
    assert_eq!(alice_again.body, alice_first.body);
    assert_eq!(bob_again.body, bob_first.body);
    assert_eq!(api.executions(), 2);
}

pub async fn the_row_and_the_stored_response_are_both_there<S: Store>(name: &str) {
    let api = Api::<S>::start(name, Settings::default()).await;
    let first = api.send(&Call::new("both")).await;
    assert_eq!(first.status, StatusCode::CREATED);
    assert_eq!(api.effects().await, 1, "the handler's row");
    assert_eq!(api.store.stored_keys().await, 1, "and the stored response");
    let replay = api.send(&Call::new("both")).await;
    assert!(replay.replayed());
    assert_eq!(replay.body, first.body);
}

pub async fn a_500_rolls_back_and_releases_the_key<S: Store>(name: &str) {
    let api = Api::<S>::start(name, Settings::default()).await;
    let failed = api
        .send(&Call::new("flaky").header("x-test-status", "500"))
        .await;
    assert_eq!(failed.status, StatusCode::INTERNAL_SERVER_ERROR);
    assert_eq!(api.store.stored_keys().await, 0, "the key was released");
    if S::TRANSACTIONAL {
        assert_eq!(
            api.effects().await,
            0,
            "the handler's row rolled back with it"
        );
    }
    let retry = api.send(&Call::new("flaky")).await;
    assert_eq!(retry.status, StatusCode::CREATED);
    assert!(!retry.replayed(), "the retry ran the handler again");
    assert_eq!(api.executions(), 2);
    if S::TRANSACTIONAL {
        assert_eq!(api.effects().await, 1);
    }
}

pub async fn an_answer_marked_keep_locked_holds_the_key_until_the_lease<S: Store>(name: &str) {
    use std::sync::atomic::{AtomicBool, Ordering};

    let lease = Duration::from_millis(1500);
    let api = Arc::new(Api::<S>::start(name, Settings::with_lease(lease)).await);
    let unsure = api
        .held(
            &Call::new("timed-out")
                .header("x-test-status", "504")
                .header("x-test-keep-locked", "1"),
            "unsure",
        )
        .await;
    // Four clients retry without a pause while the attempt ends and its key is kept locked
    // (with the claim on the handler's transaction: while the writes roll back and the claim is
    // written again): not one may slip in and run.
    let done = Arc::new(AtomicBool::new(false));
    let retries: Vec<_> = (0..4)
        .map(|_| {
            let (api, done) = (api.clone(), done.clone());
            tokio::spawn(async move {
                let mut statuses = Vec::new();
                while !done.load(Ordering::SeqCst) {
                    statuses.push(api.send(&Call::new("timed-out")).await.status);
                }
                statuses
            })
        })
        .collect();
    api.state.gate("unsure").open.notify_one();
    let unsure = unsure.await.unwrap();
    let answered_at = std::time::Instant::now();
    assert_eq!(unsure.status, StatusCode::GATEWAY_TIMEOUT);
    tokio::time::sleep(Duration::from_millis(100)).await;
    done.store(true, Ordering::SeqCst);
    let mut tried = 0;
    for retry in retries {
        for status in retry.await.unwrap() {
            assert_eq!(
                status,
                StatusCode::CONFLICT,
                "{}: a retry slipped in",
                S::LABEL
            );
            tried += 1;
        }
    }
    assert!(tried > 0, "the retries ran");
    let early = api.send(&Call::new("timed-out")).await;
    assert_eq!(early.status, StatusCode::CONFLICT, "{}", early.text());
    assert_eq!(early.problem().as_deref(), Some("key-in-flight"));
    assert_eq!(
        api.executions(),
        1,
        "nothing ran while the key stayed locked"
    );
    if S::TRANSACTIONAL {
        assert_eq!(
            api.effects().await,
            0,
            "the unsure attempt's row rolled back"
        );
    }
    tokio::time::sleep(lease.saturating_sub(answered_at.elapsed()) + Duration::from_millis(300))
        .await;
    let late = api.send(&Call::new("timed-out")).await;
    assert_eq!(late.status, StatusCode::CREATED, "{}", late.text());
    assert!(!late.replayed(), "after the lease the retry ran");
    assert_eq!(api.executions(), 2);
}

pub async fn a_4xx_from_the_handler_is_stored_and_replayed<S: Store>(name: &str) {
    let api = Api::<S>::start(name, Settings::default()).await;
    let call = Call::new("declined").header("x-test-status", "402");
    let first = api.send(&call).await;
    let again = api.send(&call).await;
    assert_eq!(
        (first.status, again.status),
        (StatusCode::PAYMENT_REQUIRED, StatusCode::PAYMENT_REQUIRED)
    );
    assert!(again.replayed());
    assert_eq!(
        api.executions(),
        1,
        "a decline is an answer, not a failure: it is not run twice"
    );
}

pub async fn a_server_killed_mid_handler_leaves_its_key_to_a_retry<S: Store>(name: &str) {
    let lease = Duration::from_secs(3);
    let api = Api::<S>::start(name, Settings::with_lease(lease)).await;
    let child = ChildServer::start(name, &api.store, lease, Duration::ZERO);
    let base = child.base.clone();
    let call = Call::new("killed-mid-handler");
    let doomed = {
        let call = call.clone().header("x-test-hang", "1");
        tokio::spawn(async move {
            let _ = tokio::time::timeout(Duration::from_secs(60), call.try_send(&base)).await;
        })
    };
    let child = tokio::time::timeout(Duration::from_secs(60), child.hanging(1))
        .await
        .expect("the child's handler did its work and hung");
    let killed_at = std::time::Instant::now();
    child.kill();
    doomed.abort();

    if S::frees_at_once() {
        // The claim on the transaction dies with the attempt's connection, its row with it; a
        // claim committed on its own names its holder, whose session died with the process.
        // Either way the retry runs as soon as the database has seen the connections close,
        // long before the lease.
        let deadline = killed_at + lease - Duration::from_millis(500);
        let retry = loop {
            let retry = api.send(&call).await;
            if retry.status != StatusCode::CONFLICT || std::time::Instant::now() > deadline {
                break retry;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        };
        assert_eq!(retry.status, StatusCode::CREATED, "{}", retry.text());
        assert!(!retry.replayed(), "nothing of the killed attempt remained");
        let again = api.send(&call).await;
        assert!(again.replayed());
        assert_eq!(api.executions(), 1, "it ran once here");
        assert_eq!(
            api.effects().await,
            1,
            "the killed attempt's row never committed"
        );
        return;
    }
    let early = api.send(&call).await;
    assert_eq!(early.status, StatusCode::CONFLICT, "{}", early.text());
    assert_eq!(early.problem().as_deref(), Some("key-in-flight"));
    assert_eq!(
        api.executions(),
        0,
        "nothing ran while the dead attempt's lease held"
    );

    tokio::time::sleep(lease.saturating_sub(killed_at.elapsed()) + Duration::from_millis(300))
        .await;
    let late = api.send(&call).await;
    assert_eq!(late.status, StatusCode::CREATED, "{}", late.text());
    assert!(
        !late.replayed(),
        "the retry took over the expired lease and ran"
    );
    let again = api.send(&call).await;
    assert!(again.replayed());
    assert_eq!(api.executions(), 1, "it ran once here");
    if S::TRANSACTIONAL {
        assert_eq!(
            api.effects().await,
            1,
            "the killed attempt's row never committed"
        );
    }
}

pub async fn a_stale_attempt_finishing_late_cannot_overwrite<S: Store>(name: &str) {
    if S::SINGLE_WRITER {
        // SQLite: the first attempt's open transaction holds the only write lock, so no retry can
        // claim the key while it runs; there is no stale attempt to fence.
        return;
    }
    let lease = Duration::from_millis(1500);
    let api = Arc::new(Api::<S>::start(name, Settings::with_lease(lease)).await);
    let call = Call::new("slow-then-stale");
    let stale = api.held(&call, "stale").await;
    tokio::time::sleep(lease + Duration::from_millis(300)).await;
    if S::LOCKED_CLAIM {
        // The slow attempt's transaction sat idle past the lease: PostgreSQL ended its session,
        // its claim and row with it. The retry runs; the slow attempt cannot store anything.
        let takeover = api.send(&call).await;
        assert_eq!(takeover.status, StatusCode::CREATED, "{}", takeover.text());
        assert!(!takeover.replayed());
        api.state.gate("stale").open.notify_one();
        let stale = stale.await.unwrap();
        assert_eq!(
            stale.status,
            StatusCode::SERVICE_UNAVAILABLE,
            "{}",
            stale.text()
        );
        let replay = api.send(&call).await;
        assert!(replay.replayed());
        assert_eq!(replay.body, takeover.body, "the retry's response is stored");
        assert_eq!(api.executions(), 2, "both attempts ran their handler");
        assert_eq!(
            api.effects().await,
            1,
            "the stale attempt's row rolled back"
        );
        return;
    }
    let takeover = api.held(&call, "takeover").await;

    // The stale attempt finishes while the take-over still runs: only the fencing token can
    // tell them apart, since neither has stored anything yet.
    api.state.gate("stale").open.notify_one();
    let stale = stale.await.unwrap();
    api.state.gate("takeover").open.notify_one();
    let takeover = takeover.await.unwrap();

    assert_eq!(takeover.status, StatusCode::CREATED, "{}", takeover.text());
    assert!(!takeover.replayed());
    let replay = api.send(&call).await;
    assert_eq!(
        replay.body, takeover.body,
        "the stored response is the take-over's"
    );
    assert_eq!(api.executions(), 2, "both attempts ran their handler");
    if S::TRANSACTIONAL {
        assert_eq!(stale.status, StatusCode::CONFLICT, "{}", stale.text());
        assert_eq!(stale.problem().as_deref(), Some("attempt-superseded"));
        assert_eq!(
            api.effects().await,
            1,
            "the stale attempt's row rolled back"
        );
    }
}

pub async fn a_stale_attempt_cannot_complete_a_newer_claim_of_its_key<S: Store>(name: &str) {
    if S::SINGLE_WRITER || S::LOCKED_CLAIM {
        // As above: no retry can claim the key while an attempt holds SQLite's write lock or
        // PostgreSQL's advisory lock on the key, so no stale attempt exists.
        return;
    }
    let lease = Duration::from_millis(1500);
    let api = Arc::new(Api::<S>::start(name, Settings::with_lease(lease)).await);
    let first = Call::new("reclaimed");
    let stale = api.held(&first, "stale").await;
    tokio::time::sleep(lease + Duration::from_millis(300)).await;
    // A retry takes over and fails: the key is released, the row gone.
    let failed = api
        .send(&first.clone().header("x-test-status", "500"))
        .await;
    assert_eq!(failed.status, StatusCode::INTERNAL_SERVER_ERROR);
    // A new request claims the key again (attempt 1 once more) and is still running when the
    // stale attempt of the old claim finishes.
    let newer = Call::new("reclaimed").body(br#"{"amount":7}"#);
    let newer_run = api.held(&newer, "newer").await;
    api.state.gate("stale").open.notify_one();
    stale.await.unwrap();
    api.state.gate("newer").open.notify_one();
    let newer_answer = newer_run.await.unwrap();

    assert_eq!(
        newer_answer.status,
        StatusCode::CREATED,
        "{}",
        newer_answer.text()
    );
    let replay = api.send(&newer).await;
    assert!(replay.replayed());
    assert_eq!(
        replay.body, newer_answer.body,
        "the newer request's own response, not the stale one's"
    );
    if S::TRANSACTIONAL {
        assert_eq!(
            api.effects().await,
            1,
            "only the newer request's row committed"
        );
    }
}

pub async fn a_client_that_hangs_up_gets_the_result_on_retry<S: Store>(name: &str) {
    let api = Api::<S>::start(name, Settings::default()).await;
    let call = Call::new("tunnel").header("x-test-delay-ms", "600");
    let hung_up = tokio::time::timeout(Duration::from_millis(150), api.send(&call)).await;
    assert!(hung_up.is_err(), "the client gave up before the answer");
    tokio::time::sleep(Duration::from_millis(900)).await;
    let retry = api.send(&Call::new("tunnel")).await;
    assert_eq!(retry.status, StatusCode::CREATED, "{}", retry.text());
    assert!(
        retry.replayed(),
        "the handler finished though its client hung up"
    );
    assert_eq!(api.executions(), 1);
    assert_eq!(api.effects().await, 1);
}

pub async fn malformed_and_overlong_keys_get_400_and_store_nothing<S: Store>(name: &str) {
    let api = Api::<S>::start(name, Settings::default()).await;
    let long = "k".repeat(256);
    for key in ["\"unterminated", "two words", "\"\"", long.as_str()] {
        let answer = api.send(&Call::new("x").raw_key(Some(key))).await;
        assert_eq!(answer.status, StatusCode::BAD_REQUEST, "{key:?}");
        assert_eq!(
            answer.problem().as_deref(),
            Some("key-malformed"),
            "{key:?}"
        );
    }
    assert!(
        api.send(&Call::new("x").raw_key(Some(&long)))
            .await
            .text()
            .contains("256 bytes"),
        "the detail says what was wrong"
    );
    assert_eq!(api.executions(), 0);
    assert_eq!(api.store.stored_keys().await, 0, "nothing stored");
}

pub async fn a_body_over_the_limit_gets_413_and_stores_nothing<S: Store>(name: &str) {
    let settings = Settings {
        max_request_body: 1024,
        ..Settings::default()
    };
    let api = Api::<S>::start(name, settings).await;
    let answer = api.send(&Call::new("big").body(&[b'x'; 2048])).await;
    assert_eq!(answer.status, StatusCode::PAYLOAD_TOO_LARGE);
    assert_eq!(answer.problem().as_deref(), Some("body-too-large"));
    assert!(answer.text().contains("1024 bytes"), "{}", answer.text());
    assert_eq!(api.executions(), 0);
    assert_eq!(api.store.stored_keys().await, 0);
    let fits = api.send(&Call::new("big").body(&[b'x'; 1024])).await;
    assert_eq!(fits.status, StatusCode::CREATED, "the key is still unused");
}

pub async fn a_missing_key_passes_through_or_is_refused_where_required<S: Store>(name: &str) {
    let api = Api::<S>::start(name, Settings::default()).await;
    let open = api.send(&Call::new("x").raw_key(None)).await;
    assert_eq!(
        open.status,
        StatusCode::CREATED,
        "without a key the request runs as usual"
    );
    assert_eq!(api.store.stored_keys().await, 0, "and nothing is stored");
    let strict = Api::<S>::start(
        &format!("{name}_strict"),
        Settings {
            require_key: true,
            ..Settings::default()
        },
    )
    .await;
    let refused = strict.send(&Call::new("x").raw_key(None)).await;
    assert_eq!(refused.status, StatusCode::BAD_REQUEST);
    assert_eq!(refused.problem().as_deref(), Some("key-required"));
    assert_eq!(strict.executions(), 0);
    assert_eq!(strict.store.stored_keys().await, 0, "nothing stored");
}

pub async fn a_keyed_request_without_credentials_is_refused<S: Store>(name: &str) {
    let api = Api::<S>::start(name, Settings::default()).await;
    // None, empty, blank (each would be one scope shared by every such client), and two.
    let calls = [
        Call::new("anonymous").by(None),
        Call::new("anonymous").by(Some("")),
        Call::new("anonymous").by(Some("   ")),
        Call::new("anonymous").header("authorization", "Bearer mallory"),
    ];
    for call in &calls {
        let answer = api.send(call).await;
        assert_eq!(answer.status, StatusCode::BAD_REQUEST, "{call:?}");
        assert_eq!(answer.problem().as_deref(), Some("no-scope"), "{call:?}");
        assert!(answer.text().contains("Authorization"), "{}", answer.text());
    }
    assert_eq!(api.executions(), 0);
    assert_eq!(api.store.stored_keys().await, 0, "nothing stored");
}

pub async fn one_client_is_one_scope_whatever_the_case_of_its_scheme<S: Store>(name: &str) {
    let api = Api::<S>::start(name, Settings::default()).await;
    let first = api
        .send(&Call::new("scheme-case").by(Some("Bearer alice")))
        .await;
    let again = api
        .send(&Call::new("scheme-case").by(Some("bearer  alice")))
        .await;
    assert_eq!(first.status, StatusCode::CREATED);
    assert!(
        again.replayed(),
        "the scheme is case-insensitive (RFC 9110)"
    );
    let other = api
        .send(&Call::new("scheme-case").by(Some("Bearer ALICE")))
        .await;
    assert!(!other.replayed(), "the credentials themselves are not");
    assert_eq!(api.executions(), 2);
}

pub async fn an_oversize_response_is_sent_whole_and_never_run_again<S: Store>(name: &str) {
    let settings = Settings {
        max_stored_body: 1024,
        ..Settings::default()
    };
    let api = Api::<S>::start(name, settings).await;
    let call = Call::new("huge-answer").header("x-test-response-bytes", "4096");
    let first = api.send(&call).await;
    assert_eq!(first.status, StatusCode::CREATED);
    assert_eq!(
        first.body.len(),
        4096,
        "the first client gets the whole body"
    );
    let retry = api.send(&call).await;
    assert_eq!(
        retry.status,
        StatusCode::CREATED,
        "the retry learns the request succeeded"
    );
    assert!(retry.replayed());
    assert_eq!(retry.header("idempotent-body-omitted"), Some("too-large"));
    assert_eq!(
        retry.header("location"),
        first.header("location"),
        "and where the result is"
    );
    assert!(retry.body.is_empty());
    assert_eq!(api.executions(), 1, "never a silent re-execution");
}

pub async fn quoted_and_bare_keys_name_the_same_key<S: Store>(name: &str) {
    let api = Api::<S>::start(name, Settings::default()).await;
    let quoted = api.send(&Call::new("x").raw_key(Some("\"k-1\""))).await;
    let bare = api.send(&Call::new("x").raw_key(Some("k-1"))).await;
    assert!(!quoted.replayed());
    assert!(bare.replayed(), "\"k-1\" and k-1 are one key");
    assert_eq!(api.executions(), 1);
}

pub async fn a_client_over_its_key_caps_gets_429_and_runs_nothing<S: Store>(name: &str) {
    let settings = Settings {
        max_keys_per_scope: Some(3),
        max_in_flight_per_scope: Some(1),
        ..Settings::default()
    };
    let api = Arc::new(Api::<S>::start(name, settings).await);
    if !S::COUNTS_KEYS {
        // A store that cannot count is not capped: documented, and checked here.
        for n in 0..5 {
            assert_eq!(
                api.send(&Call::new(&format!("cap-{n}"))).await.status,
                StatusCode::CREATED
            );
        }
        return;
    }
    if S::SINGLE_WRITER || S::LOCKED_CLAIM {
        // A held handler holds SQLite's one write lock, and a claim on the handler's
        // transaction is invisible to the count until it commits: the in-flight cap is for
        // stores whose claims commit first.
        let first = api.send(&Call::new("cap-held")).await;
        assert_eq!(first.status, StatusCode::CREATED);
        assert_eq!(
            api.send(&Call::new("cap-second").by(Some("Bearer bob")))
                .await
                .status,
            StatusCode::CREATED
        );
    } else {
        // In flight: one held at a gate, a second key from the same client is refused.
        let held = api.held(&Call::new("cap-held"), "cap").await;
        let second = api.send(&Call::new("cap-second")).await;
        assert_eq!(
            second.status,
            StatusCode::TOO_MANY_REQUESTS,
            "{}",
            second.text()
        );
        assert_eq!(second.problem().as_deref(), Some("too-many-in-flight"));
        assert!(second.header("retry-after").is_some());
        let other_client = api
            .send(&Call::new("cap-second").by(Some("Bearer bob")))
            .await;
        assert_eq!(
            other_client.status,
            StatusCode::CREATED,
            "another client has caps of its own"
        );
        api.state.gate("cap").open.notify_one();
        assert_eq!(held.await.unwrap().status, StatusCode::CREATED);
    }
    // Stored: with cap-held done, two more keys fit, the fourth does not.
    for key in ["cap-second", "cap-third"] {
        assert_eq!(
            api.send(&Call::new(key)).await.status,
            StatusCode::CREATED,
            "{key}"
        );
    }
    let over = api.send(&Call::new("cap-fourth")).await;
    assert_eq!(
        over.status,
        StatusCode::TOO_MANY_REQUESTS,
        "{}",
        over.text()
    );
    assert_eq!(over.problem().as_deref(), Some("too-many-keys"));
    let replay = api.send(&Call::new("cap-held")).await;
    assert!(replay.replayed(), "stored keys still replay over the cap");
    assert_eq!(
        api.executions(),
        4,
        "cap-held, bob's, cap-second, cap-third"
    );
    assert_eq!(
        api.store.stored_keys().await,
        4,
        "the refused keys left nothing behind"
    );
}

/// With a replay cache, a retry of a key this process stored, or replayed once from the store,
/// is answered from memory: with the store's keys all gone (an operator's eviction, the purge
/// elsewhere), retries still replay byte for byte within the cache's time to live, another
/// request with the key still gets 422, another client's key of the same name still runs, and
/// past the time to live the store decides again (here: the key runs anew). Unique keys never
/// grow the cache past its bounds.
pub async fn a_replay_cache_answers_retries_from_memory_within_its_window<S: Store>(name: &str) {
    const TTL: Duration = Duration::from_secs(4);
    const ENTRIES: u64 = 8;
    const BYTES: u64 = 1 << 20;
    let cache = guestlist_http::ReplayCache::new(ENTRIES, BYTES, TTL);
    let settings = Settings {
        replay_cache: Some(cache.clone()),
        ..Settings::default()
    };
    let api = Api::<S>::start(name, settings).await;
    // Another instance on the same store, which remembers nothing.
    let elsewhere = Server::start(api.store.router(api.state.clone(), &Settings::default())).await;

    let stored_here = Call::new("remembered-here");
    let here = api.send(&stored_here).await;
    assert_eq!(here.status, StatusCode::CREATED);
    assert_eq!(cache.len(), 1, "{}: stored, then remembered", S::LABEL);
    let stored_elsewhere = Call::new("remembered-from-the-store");
    let there = stored_elsewhere.send(&elsewhere.base).await;
    assert_eq!(there.status, StatusCode::CREATED);
    let replayed = api.send(&stored_elsewhere).await;
    assert!(replayed.replayed(), "{}: replayed from the store", S::LABEL);
    assert_eq!(cache.len(), 2, "{}: and remembered", S::LABEL);
    let remembered_at = std::time::Instant::now();

    api.store.forget_keys().await;
    assert_eq!(
        api.store.stored_keys().await,
        0,
        "the store has no key left"
    );
    for (call, first) in [(&stored_here, &here), (&stored_elsewhere, &there)] {
        let again = api.send(call).await;
        assert!(again.replayed(), "{}: from memory", S::LABEL);
        assert_eq!(again.status, first.status);
        assert_eq!(again.body, first.body, "{}: byte for byte", S::LABEL);
        assert_eq!(again.header("content-type"), first.header("content-type"));
        assert_eq!(again.header("location"), first.header("location"));
    }
    assert_eq!(api.executions(), 2, "{}: nothing ran again", S::LABEL);
    let other_body = api
        .send(&stored_here.clone().body(br#"{"amount":101}"#))
        .await;
    assert_eq!(
        other_body.status,
        StatusCode::UNPROCESSABLE_ENTITY,
        "{}: another request with the key, checked in memory too",
        S::LABEL
    );
    let bob = api.send(&stored_here.clone().by(Some("Bearer bob"))).await;
    assert_eq!(
        (bob.status, bob.replayed()),
        (StatusCode::CREATED, false),
        "{}: memory never crosses clients",
        S::LABEL
    );
    assert_eq!(api.executions(), 3);
    assert!(
        remembered_at.elapsed() < TTL,
        "the checks above ran within the window (they took {:?})",
        remembered_at.elapsed()
    );

    tokio::time::sleep(TTL.saturating_sub(remembered_at.elapsed()) + Duration::from_millis(200))
        .await;
    let past = api.send(&stored_here).await;
    assert_eq!(
        (past.status, past.replayed()),
        (StatusCode::CREATED, false),
        "{}: past the window the store decides, and it no longer has the key",
        S::LABEL
    );
    assert_eq!(api.executions(), 4);

    for n in 0..40 {
        let unique = api.send(&Call::new(&format!("unique-{n}"))).await;
        assert_eq!(unique.status, StatusCode::CREATED);
    }
    assert!(
        cache.len() as u64 <= ENTRIES && cache.weight() <= BYTES,
        "{}: 40 unique keys, and the cache holds {} entries, {} bytes",
        S::LABEL,
        cache.len(),
        cache.weight()
    );
}
