//! A client that hangs up at every point of a keyed request through the gateway on PostgreSQL,
//! with the key table's commits held open on purpose so that the hang-up lands in the window.

use std::time::{Duration, Instant};

use guestlist_testkit::hang_up::{HangUp, NOTICE, RETRY_FOR};
use guestlist_testkit::raw_http::post_partly;

use crate::harness::{Gateways, Store, Upstream, post};

/// A client hangs up at `point`; a retry with the same key gets the first attempt's stored
/// answer (hung up before the claim: runs it), and the upstream ran the request once.
pub async fn a_client_that_hangs_up_never_strands_its_key(test: &str, point: HangUp) {
    let tag = guestlist_testkit::short_tag(test);
    let store = Store::postgres(&tag, 1).await;
    let upstream = Upstream::start().await;
    let gateways = Gateways::start(&upstream.url, &store, &[]).await;
    let Store::Postgres { url, table, .. } = &store else {
        unreachable!("a PostgreSQL store")
    };
    let base = gateways.everywhere("")[0].clone();
    let addr = base.trim_start_matches("http://").to_owned();
    let path = format!("/charges?first_delay_ms={}", 1_000);
    let key = format!("hang-up-{tag}");
    let headers = [
        ("authorization", "Bearer alice"),
        ("idempotency-key", key.as_str()),
    ];
    let body = b"{\"amount\":1200}";

    let held = point.hold_commit(url, table).await;
    let sent = point.sent(body);
    let client = post_partly(&addr, &path, &headers, body, sent).await;
    match (&held, point) {
        (Some(held), _) => held.until_waiting().await,
        (None, HangUp::DuringTheWork) => upstream.reached("/charges").await,
        (None, _) => tokio::time::sleep(Duration::from_millis(50)).await,
    }
    drop(client); // the hang-up
    tokio::time::sleep(NOTICE).await;
    if let Some(held) = held {
        held.release().await;
    }

    let started = Instant::now();
    let retry = loop {
        let answer = post(&format!("{base}{path}"), &headers, body).await;
        if answer.status != 409 || started.elapsed() > RETRY_FOR {
            break answer;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    assert_eq!(
        retry.status,
        201,
        "hung up {point:?}: the retry gets an answer within {RETRY_FOR:?}, not a key stranded \
         for the lease: {}",
        String::from_utf8_lossy(&retry.body)
    );
    assert_eq!(
        retry.replayed,
        point != HangUp::BeforeTheClaim,
        "hung up {point:?}: a request accepted runs to its stored answer; one that never \
         arrived claims nothing"
    );
    assert_eq!(
        upstream.executions("/charges"),
        1,
        "the upstream ran it once"
    );
}
