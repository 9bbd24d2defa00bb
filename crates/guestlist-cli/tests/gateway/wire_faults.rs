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
    use guestlist_testkit::private_server::PrivateServer;
    use std::collections::BTreeMap;
    use std::sync::Arc;
    use std::sync::atomic::{AtomicU64, Ordering};
    use std::time::Instant;

    const CLIENTS: usize = 4;
    const EACH: usize = 25;
    let cluster = PrivatePostgres::start();
    let store = Store::Postgres {
        url: cluster.url(),
        table: "gw_restarted".to_owned(),
        gateways: 1,
    };
    let upstream = Upstream::start().await;
    let gateway = Arc::new(Gateways::start(&upstream.url, &store, &["--lease", "6s"]).await);
    let answered = Arc::new(AtomicU64::new(0));
    let clients: Vec<_> = (0..CLIENTS)
        .map(|client| {
            let (gateway, answered) = (gateway.clone(), answered.clone());
            tokio::spawn(async move {
                let mut bodies = BTreeMap::new();
                for n in 0..EACH {
                    let key = format!("restart-{client}-{n}");
                    let headers = [
                        ("authorization", "Bearer alice"),
                        ("idempotency-key", key.as_str()),
                    ];
                    let started = Instant::now();
                    let answer = loop {
                        let answer = post(&gateway.route("/charges"), &headers, b"{}").await;
                        if answer.status == 201 {
                            break answer;
                        }
                        assert!(
                            started.elapsed() < Duration::from_secs(60),
                            "{key}: still {answer:?} after a minute"
                        );
                        tokio::time::sleep(Duration::from_millis(100)).await;
                    };
                    answered.fetch_add(1, Ordering::SeqCst);
                    bodies.insert(key, answer.body);
                    tokio::time::sleep(Duration::from_millis(10)).await;
                }
                bodies
            })
        })
        .collect();
    while answered.load(Ordering::SeqCst) < 20 {
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    assert!(
        answered.load(Ordering::SeqCst) < (CLIENTS * EACH) as u64 - 20,
        "the restart lands while the clients send"
    );
    cluster.restart(Duration::from_secs(1)).await;

    let mut bodies = BTreeMap::new();
    for client in clients {
        bodies.extend(client.await.expect("every client is answered in the end"));
    }
    for (key, body) in &bodies {
        let headers = [
            ("authorization", "Bearer alice"),
            ("idempotency-key", key.as_str()),
        ];
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
