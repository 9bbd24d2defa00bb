//! Every outcome of a keyed request reaches the metrics recorder.

mod common;

use common::client::{Call, Server};
use common::stores::{Settings, Sql, Store};
use guestlist_core::KeyStore;
use metrics_util::debugging::{DebugValue, DebuggingRecorder};

/// The `guestlist_http_requests_total` counters recorded so far, by outcome.
fn outcomes(snapshotter: &metrics_util::debugging::Snapshotter) -> Vec<(String, u64)> {
    snapshotter
        .snapshot()
        .into_vec()
        .into_iter()
        .filter(|(key, ..)| key.key().name() == "guestlist_http_requests_total")
        .filter_map(|(key, _, _, value)| {
            let outcome = key
                .key()
                .labels()
                .find(|l| l.key() == "outcome")?
                .value()
                .to_owned();
            match value {
                DebugValue::Counter(n) => Some((outcome, n)),
                _ => None,
            }
        })
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_outcome_is_counted() {
    let recorder = DebuggingRecorder::new();
    let snapshotter = recorder.snapshotter();
    recorder
        .install()
        .expect("the only recorder in this test binary");

    let store = Sql::<sqlx::Sqlite>::open("metrics_every_outcome").await;
    let state = common::app::AppState::default();
    let server = Server::start(store.router(state, &Settings::default())).await;
    let base = &server.base;
    Call::new("counted").send(base).await; // fresh
    Call::new("counted").send(base).await; // replayed
    Call::new("counted").send(base).await; // replayed
    Call::new("counted").body(b"other").send(base).await; // fingerprint_mismatch
    Call::new("failing")
        .header("x-test-status", "503")
        .send(base)
        .await; // released
    Call::new("x").raw_key(Some("two words")).send(base).await; // refused

    // An attempt that holds a key and never finishes (it crashed), claimed straight on the store
    // with the fingerprint the layer computes for the same request.
    let scope = guestlist_core::Scope::from_credentials(b"Bearer alice");
    let key = guestlist_core::IdempotencyKey::new("crashed").unwrap();
    let fingerprint =
        guestlist_core::Fingerprint::builder("POST", "/payments").body(br#"{"amount":100}"#);
    let lease = std::time::Duration::from_millis(400);
    store
        .keys()
        .claim(&scope, &key, &fingerprint, lease)
        .await
        .unwrap();
    Call::new("crashed").send(base).await; // conflict_in_flight
    tokio::time::sleep(lease + std::time::Duration::from_millis(100)).await;
    let taken = Call::new("crashed").send(base).await; // lease_takeover
    assert_eq!(
        taken.status,
        reqwest::StatusCode::CREATED,
        "{}",
        taken.text()
    );

    let counted = outcomes(&snapshotter);
    let count = |outcome: &str| {
        counted
            .iter()
            .filter(|(o, _)| o == outcome)
            .map(|(_, n)| n)
            .sum::<u64>()
    };
    assert_eq!(count("fresh"), 1, "{counted:?}");
    assert_eq!(count("replayed"), 2, "{counted:?}");
    assert_eq!(count("fingerprint_mismatch"), 1, "{counted:?}");
    assert_eq!(count("released"), 1, "{counted:?}");
    assert_eq!(count("refused"), 1, "{counted:?}");
    assert_eq!(count("conflict_in_flight"), 1, "{counted:?}");
    assert_eq!(count("lease_takeover"), 1, "{counted:?}");

    // The keys this process holds in flight: one while a slow request runs, none after. (A
    // snapshot takes what was recorded since the last one: the level is their sum.)
    let level = std::cell::Cell::new(0.0);
    let in_flight = || {
        let recorded = snapshotter
            .snapshot()
            .into_vec()
            .into_iter()
            .find(|(key, ..)| key.key().name() == "guestlist_http_keys_in_flight")
            .and_then(|(.., value)| match value {
                DebugValue::Gauge(n) => Some(n.into_inner()),
                _ => None,
            });
        level.set(level.get() + recorded.unwrap_or(0.0));
        Some(level.get())
    };
    assert_eq!(
        in_flight(),
        Some(0.0),
        "every attempt so far let its key go"
    );
    let slow = tokio::spawn({
        let base = base.clone();
        async move {
            Call::new("slow")
                .header("x-test-delay-ms", "1500")
                .send(&base)
                .await
        }
    });
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    while in_flight() != Some(1.0) {
        assert!(
            std::time::Instant::now() < deadline,
            "the slow request's key is counted"
        );
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    }
    assert_eq!(slow.await.unwrap().status, reqwest::StatusCode::CREATED);
    assert_eq!(in_flight(), Some(0.0));
}
