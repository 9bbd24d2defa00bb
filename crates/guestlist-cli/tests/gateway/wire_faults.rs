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
