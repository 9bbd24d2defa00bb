//! The gateway's key store cut off right after it was sent an answer to keep, through a
//! [`FaultProxy`]: whatever the store did with the write, the upstream ran once and every
//! retry replays its answer.

use std::time::Duration;

use guestlist_testkit::fault_proxy::{Ambiguity, FaultProxy};

use crate::harness::{Gateways, Store, Upstream, post};

/// Where every answer of the test upstream's body starts to differ from the request's: in the
/// write that stores it, and nowhere before.
const ANSWER: &[u8] = b"\"body_bytes\":";

/// The store's connection dies after the write of the upstream's answer went out, once after
/// the store applied it and once before it saw it. The client gets the upstream's answer; the
/// gateway stores it on a later try; five retries replay it; the upstream ran once.
pub async fn an_ambiguous_write_of_the_answer_is_replayed_not_run_again(store: Store) {
    for ambiguity in [Ambiguity::Landed, Ambiguity::Lost] {
        let (proxy, url) = FaultProxy::for_url(store.url().expect("a store with a server")).await;
        let through = store.at(url);
        let upstream = Upstream::start().await;
        let gateway = Gateways::start(&upstream.url, &through, &[]).await;
        let route = gateway.route("/charges");
        let key = format!("ambiguous-{ambiguity:?}");
        let headers = [
            ("authorization", "Bearer alice"),
            ("idempotency-key", key.as_str()),
        ];
        let sprung = proxy.trap(ANSWER, ambiguity);
        let first = post(&route, &headers, b"{\"amount\":1200}").await;
        sprung.wait(Duration::from_secs(10)).await;
        assert_eq!(first.status, 201, "{ambiguity:?}: {first:?}");
        for _ in 0..5 {
            let retry = post(&route, &headers, b"{\"amount\":1200}").await;
            assert!(
                retry.replayed && retry.status == 201,
                "{ambiguity:?}: the answer was kept after all: {retry:?}"
            );
            assert_eq!(
                retry.body, first.body,
                "{ambiguity:?}: the answer the client got"
            );
        }
        assert_eq!(
            upstream.executions("/charges"),
            1,
            "{ambiguity:?}: the upstream ran once"
        );
    }
}

/// Four clients send 25 keyed requests each through one gateway on a PostgreSQL of the test's
/// own, retrying each with its key until it is answered, while the database is stopped the hard
/// way (`pg_ctl stop -m immediate`) and started again. The upstream ran each key once, every
/// key's retry replays the answer its client got, and the gateway never stopped.
pub async fn a_database_restarted_under_four_clients_runs_each_key_once() {
    use guestlist_testkit::private_postgres::PrivatePostgres;
    use guestlist_testkit::restart_clients::{CLIENTS, EACH, through_a_restart};
    use std::sync::Arc;

    let cluster = PrivatePostgres::start();
    let store = Store::Postgres {
        url: cluster.url(),
        table: "gw_restarted".to_owned(),
        gateways: 1,
    };
    let upstream = Upstream::start().await;
    let gateway = Arc::new(Gateways::start(&upstream.url, &store, &["--lease", "6s"]).await);
    let keyed = |key: &str| {
        [
            ("authorization", "Bearer alice".to_owned()),
            ("idempotency-key", key.to_owned()),
        ]
    };
    let answered = through_a_restart(&cluster, {
        let gateway = gateway.clone();
        move |key: String| {
            let gateway = gateway.clone();
            async move {
                let headers = keyed(&key);
                let headers = headers
                    .each_ref()
                    .map(|(name, value)| (*name, value.as_str()));
                let answer = post(&gateway.route("/charges"), &headers, b"{}").await;
                if answer.status == 201 {
                    Ok(answer.body)
                } else {
                    Err(format!("{answer:?}"))
                }
            }
        }
    })
    .await;
    for (key, body) in &answered.bodies {
        let headers = keyed(key);
        let headers = headers
            .each_ref()
            .map(|(name, value)| (*name, value.as_str()));
        let again = post(&gateway.route("/charges"), &headers, b"{}").await;
        assert!(again.replayed, "{key}: {again:?}");
        assert_eq!(&again.body, body, "{key}: the answer its client got");
    }
    assert_eq!(
        upstream.executions("/charges"),
        (CLIENTS * EACH) as u64,
        "the upstream ran each key once"
    );
}
