//! The gateway's place in a trace: the client's `traceparent` reaches the upstream, as it came
//! when the gateway exports nothing, and as the child of the gateway's own spans when it exports
//! them (`--otlp-endpoint`).

use std::time::Duration;

use guestlist_testkit::otlp::{Collector, Received, ancestry};

use crate::harness::{Gateway, Store, Upstream, post};

const TRACE_ID: &str = "4bf92f3577b34da6a3ce929d0e0e4736";
const CLIENT_SPAN: &str = "00f067aa0ba902b7";

fn client_traceparent() -> String {
    format!("00-{TRACE_ID}-{CLIENT_SPAN}-01")
}

/// The `traceparent` the upstream received for a keyed POST through `gateway`.
async fn upstream_traceparent(gateway: &Gateway, key: &str) -> String {
    let traceparent = client_traceparent();
    let headers = [
        ("authorization", "Bearer alice"),
        ("idempotency-key", key),
        ("traceparent", traceparent.as_str()),
    ];
    let answer = post(&format!("{}/charges", gateway.url), &headers, b"{}").await;
    assert_eq!(answer.status, 201);
    answer.json()["traceparent"]
        .as_str()
        .expect("the upstream got a traceparent")
        .to_owned()
}

#[tokio::test(flavor = "multi_thread")]
async fn without_an_exporter_the_clients_trace_context_reaches_the_upstream_as_it_came() {
    let upstream = Upstream::start().await;
    let store = Store::sqlite().await;
    let gateway = Gateway::start(&upstream.url, &store, &[]).await;
    assert_eq!(
        upstream_traceparent(&gateway, "plain").await,
        client_traceparent()
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn an_exporting_gateway_is_a_hop_of_the_clients_trace() {
    let collector = Collector::start().await;
    let upstream = Upstream::start().await;
    let store = Store::sqlite().await;
    let gateway = Gateway::start_with_env(
        &upstream.url,
        &store,
        &["--otlp-endpoint", &collector.url],
        &[("OTEL_BSP_SCHEDULE_DELAY", "100")],
    )
    .await;
    let sent = upstream_traceparent(&gateway, "traced").await;
    let [_, trace, parent, _] = sent.split('-').collect::<Vec<_>>()[..] else {
        panic!("a W3C traceparent: {sent}")
    };
    assert_eq!(trace, TRACE_ID, "the client's trace goes on upstream");

    // The span the upstream is the child of: the gateway's call, under its keyed request's
    // span, under the client's.
    let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
    let chain: Vec<Received> = loop {
        let spans = collector.spans();
        if let Some(call) = spans.iter().find(|s| s.id == parent) {
            let chain = ancestry(&spans, call);
            if chain.len() >= 2 {
                break chain;
            }
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "the gateway's spans did not arrive: {spans:#?}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    let [call, request] = &chain[..] else {
        panic!("two spans of the gateway's: {chain:#?}")
    };
    assert!(chain.iter().all(|s| s.service == "guestlist-gateway"));
    assert!(chain.iter().all(|s| s.trace == TRACE_ID));
    assert_eq!(call.attribute("url.path"), Some("/charges"));
    assert_eq!(call.attribute("http.response.status_code"), Some("201"));
    assert_eq!(request.attribute("guestlist.key"), Some("traced"));
    assert_eq!(request.attribute("guestlist.outcome"), Some("fresh"));
    assert_eq!(
        request.parent, CLIENT_SPAN,
        "the child of the client's span"
    );
}
