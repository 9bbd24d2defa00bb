//! Faults on the wire between the layer and its store, through a
//! [`FaultProxy`](guestlist_testkit::fault_proxy::FaultProxy): the connection dies right after
//! the response's write went out, whatever the store did with it.

use std::time::{Duration, Instant};

use guestlist_testkit::fault_proxy::{Ambiguity, FaultProxy};
use reqwest::StatusCode;

use super::app::AppState;
use super::client::{Call, Server};
use super::stores::{Settings, Store};

/// The lease of the stories: short, since a lost commit in transactional mode leaves the key to
/// it.
const LEASE: Duration = Duration::from_secs(2);

/// The connection dies after the response's write (transactional: the `COMMIT` of the payment
/// and its response; plain: the write of the response) went out, once after the store applied
/// it and once before it saw it. The first attempt is never "done" for work that did not
/// commit: transactional mode answers 503; plain mode sends the handler's answer and stores it
/// on a later try. A retry with the same key, within the lease and a margin, gets one answer
/// that stays (a replay where the write landed, the work run once where it was lost), and there
/// is one payment and one key in the end.
pub async fn an_ambiguous_write_of_the_answer_ends_in_one_effect<S: Store>(name: &str) {
    let frame = S::answer_frame().expect("a store with a wire");
    for ambiguity in [Ambiguity::Landed, Ambiguity::Lost] {
        let store = S::open(&format!("{name}_{ambiguity:?}")).await;
        let (proxy, url) = FaultProxy::for_url(store.url()).await;
        let through = S::attach(&url, store.tag()).await;
        let state = AppState::default();
        let server =
            Server::start(through.router(state.clone(), &Settings::with_lease(LEASE))).await;
        let call = Call::new("ambiguous-1");

        let sprung = proxy.trap(frame, ambiguity);
        let first = call.send(&server.base).await;
        sprung.wait(Duration::from_secs(10)).await;
        let started = Instant::now();
        let retry = loop {
            let answer = call.send(&server.base).await;
            if answer.status != StatusCode::CONFLICT || started.elapsed() > LEASE * 5 {
                break answer;
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        };
        let label = format!("{} ({ambiguity:?})", S::LABEL);
        assert_eq!(
            retry.status,
            StatusCode::CREATED,
            "{label}: the retry is answered within the lease and a margin, not stranded: {}",
            retry.text()
        );
        if S::TRANSACTIONAL {
            assert_eq!(
                first.status,
                StatusCode::SERVICE_UNAVAILABLE,
                "{label}: a commit whose answer never came is no success: {}",
                first.text()
            );
            assert_eq!(
                retry.replayed(),
                ambiguity == Ambiguity::Landed,
                "{label}: the retry finds out what the database did"
            );
        } else {
            assert_eq!(
                first.status,
                StatusCode::CREATED,
                "{label}: {}",
                first.text()
            );
            assert!(
                retry.replayed(),
                "{label}: the handler's answer was stored after all"
            );
            assert_eq!(retry.body, first.body, "{label}: the answer the client got");
        }
        let again = call.send(&server.base).await;
        assert!(again.replayed(), "{label}: the answer stays");
        assert_eq!(again.body, retry.body, "{label}");
        assert_eq!(store.effects(&state).await, 1, "{label}: one payment");
        assert_eq!(store.stored_keys().await, 1, "{label}: one key, answered");
    }
}

/// Four clients send 25 keyed requests each, retrying each with its key until it is answered
/// (a 409 or a 503 asks to), while the database (a PostgreSQL of the test's own) is stopped the
/// hard way (`pg_ctl stop -m immediate`) and started again. Every key ends with one payment and
/// one stored answer, which its next retry replays; the server never stopped.
pub async fn a_database_restarted_under_four_clients_answers_each_key_once<S: Store>(name: &str) {
    use guestlist_testkit::private_postgres::PrivatePostgres;
    use guestlist_testkit::restart_clients::{CLIENTS, EACH, through_a_restart};
    use std::sync::Arc;

    let cluster = PrivatePostgres::start();
    let store = S::open_at(&cluster.url(), name).await;
    let state = AppState::default();
    let server = Arc::new(
        Server::start(store.router(state.clone(), &Settings::with_lease(LEASE * 3))).await,
    );
    let answered = through_a_restart(&cluster, {
        let server = server.clone();
        move |key: String| {
            let server = server.clone();
            async move {
                let answer = Call::new(&key).send(&server.base).await;
                if answer.status == StatusCode::CREATED {
                    Ok(answer.body)
                } else {
                    Err(format!("{}: {}", answer.status, answer.text()))
                }
            }
        }
    })
    .await;
    eprintln!(
        "{}: {} answers asked to be retried",
        S::LABEL,
        answered.retried
    );
    for (key, body) in &answered.bodies {
        let again = Call::new(key).send(&server.base).await;
        assert!(again.replayed(), "{}: {key}: {}", S::LABEL, again.text());
        assert_eq!(
            &again.body,
            body,
            "{}: {key}: the answer its client got",
            S::LABEL
        );
    }
    let keys = (CLIENTS * EACH) as u64;
    assert_eq!(
        store.effects(&state).await,
        keys,
        "{}: one payment per key",
        S::LABEL
    );
    assert_eq!(
        store.stored_keys().await,
        keys,
        "{}: one key each",
        S::LABEL
    );
}

/// The first attempt's traffic to its store stalls (a [`FaultProxy`] holds every byte) while
/// its handler finishes, for longer than the lease; a retry on another server, straight to the
/// store, takes the key over and is answered. Then the stall ends and the first attempt's late
/// write reaches the store: it changes nothing (fenced), and the stored answer stays the
/// take-over's. Transactional mode rolls the stale attempt's payment back; plain mode's work
/// was outside the store, so both attempts ran (which is why the lease must outlast the work).
pub async fn a_stalled_attempt_past_its_lease_changes_nothing_once_released<S: Store>(name: &str) {
    let store = S::open(name).await;
    let (proxy, url) = FaultProxy::for_url(store.url()).await;
    let stalled = S::attach(&url, store.tag()).await;
    let state = AppState::default();
    let settings = Settings::with_lease(LEASE);
    let first_server = Server::start(stalled.router(state.clone(), &settings)).await;
    let second_server = Server::start(store.router(state.clone(), &settings)).await;
    let call = Call::new("stalled-1");

    let gate = state.gate("stall");
    let stale = tokio::spawn({
        let (call, base) = (
            call.clone().header("x-test-block", "stall"),
            first_server.base.clone(),
        );
        async move { call.send(&base).await }
    });
    tokio::time::timeout(Duration::from_secs(10), gate.entered.notified())
        .await
        .expect("the first attempt's handler starts");
    proxy.stall();
    gate.open.notify_one();
    tokio::time::sleep(LEASE + Duration::from_millis(500)).await;

    let started = Instant::now();
    let takeover = loop {
        let answer = call.send(&second_server.base).await;
        if answer.status != StatusCode::CONFLICT || started.elapsed() > LEASE * 5 {
            break answer;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    assert_eq!(
        takeover.status,
        StatusCode::CREATED,
        "{}: {}",
        S::LABEL,
        takeover.text()
    );
    assert!(!takeover.replayed(), "{}: the retry took over", S::LABEL);

    proxy.release();
    let stale = tokio::time::timeout(Duration::from_secs(30), stale)
        .await
        .expect("the stalled attempt ends once released")
        .unwrap();
    let expected = if S::LOCKED_CLAIM {
        // Its session ended past the lease (idle in its transaction): nothing of it committed.
        StatusCode::SERVICE_UNAVAILABLE
    } else if S::TRANSACTIONAL {
        StatusCode::CONFLICT
    } else {
        StatusCode::CREATED
    };
    assert_eq!(stale.status, expected, "{}: {}", S::LABEL, stale.text());
    let replay = call.send(&second_server.base).await;
    assert!(replay.replayed(), "{}", S::LABEL);
    assert_eq!(
        replay.body,
        takeover.body,
        "{}: the stored answer is the take-over's",
        S::LABEL
    );
    assert_eq!(state.executions(), 2, "{}: both attempts ran", S::LABEL);
    let payments = if S::TRANSACTIONAL { 1 } else { 2 };
    assert_eq!(
        store.effects(&state).await,
        payments,
        "{}: the stale attempt's payment rolled back where it could",
        S::LABEL
    );
    assert_eq!(store.stored_keys().await, 1, "{}", S::LABEL);
}
