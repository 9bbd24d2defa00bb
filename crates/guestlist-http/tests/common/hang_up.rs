//! A client that hangs up at every point of a keyed request, with PostgreSQL holding the
//! commit open on purpose (`guestlist_testkit::hang_up`) so that the hang-up lands inside the
//! window, every time.

use std::time::{Duration, Instant};

use guestlist_testkit::hang_up::{HangUp, NOTICE, RETRY_FOR};
use guestlist_testkit::raw_http::post_partly;
use reqwest::StatusCode;

use super::app::AppState;
use super::client::{Call, Server};
use super::stores::{Settings, Store};

/// A client hangs up at `point`; a retry with the same key then gets the first attempt's
/// stored answer (or, hung up before the claim, runs it), and the handler has run once.
pub async fn a_client_that_hangs_up_never_strands_its_key<S: Store>(name: &str, point: HangUp) {
    let store = S::open(name).await;
    let state = AppState::default();
    let server = Server::start(store.router(state.clone(), &Settings::default())).await;
    let addr = server.base.trim_start_matches("http://").to_owned();
    let key = format!("hang-up-{}", store.tag());
    let table = format!("keys_{}", store.tag());
    let call = Call::new(&key);

    let held = point.hold_commit(store.url(), &table).await;
    let gate = (point == HangUp::DuringTheWork).then(|| state.gate("hang-up"));

    let body = br#"{"amount":100}"#;
    let mut headers = vec![
        ("idempotency-key", key.as_str()),
        ("authorization", "Bearer alice"),
        ("content-type", "application/json"),
    ];
    if point == HangUp::DuringTheWork {
        headers.push(("x-test-block", "hang-up"));
    }
    let sent = point.sent(body);
    let client = post_partly(&addr, "/payments", &headers, body, sent).await;
    match (&held, &gate) {
        (Some(held), _) => held.until_waiting().await,
        (None, Some(gate)) => {
            tokio::time::timeout(RETRY_FOR, gate.entered.notified())
                .await
                .expect("the handler starts");
        }
        (None, None) => tokio::time::sleep(Duration::from_millis(50)).await,
    }
    drop(client); // the hang-up
    tokio::time::sleep(NOTICE).await;
    if let Some(held) = held {
        held.release().await;
    }
    if let Some(gate) = gate {
        gate.open.notify_one();
    }

    let started = Instant::now();
    let retry = loop {
        let answer = call.send(&server.base).await;
        if answer.status != StatusCode::CONFLICT || started.elapsed() > RETRY_FOR {
            break answer;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    assert_eq!(
        retry.status,
        StatusCode::CREATED,
        "hung up {point:?} on {}: the retry gets an answer within {RETRY_FOR:?}, not a key \
         stranded for the lease: {}",
        S::LABEL,
        retry.text()
    );
    assert_eq!(
        retry.replayed(),
        point != HangUp::BeforeTheClaim,
        "hung up {point:?} on {}: a request accepted runs to its stored answer; one that never \
         arrived claims nothing",
        S::LABEL
    );
    assert_eq!(state.executions(), 1, "the handler ran once");
    assert_eq!(store.effects(&state).await, 1, "one payment");
    assert_eq!(store.stored_keys().await, 1, "one key, answered");
}
