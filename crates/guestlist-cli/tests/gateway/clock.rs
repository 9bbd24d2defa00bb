//! Two gateways on one key table, one whose clock is ten minutes off: the lease of a key is
//! judged on the database's clock, so neither takes over the other's attempt early.

use guestlist_testkit::skewed_clock;

use crate::harness::{Gateway, Store, Upstream, post};

/// A key in flight on one gateway is in flight for the other, whichever clock is off: a
/// gateway ten minutes behind claims a key (its upstream takes 2 s) and the other, asked for it
/// meanwhile, answers 409, not a take-over; the same with a gateway ten minutes ahead asked
/// for the other's key. Each key ran once upstream, and a retry replays it.
pub async fn a_gateway_whose_clock_is_off_takes_no_key_over_early() {
    let store = Store::postgres("clock_skew", 1).await;
    let upstream = Upstream::start().await;
    let flags = ["--lease", "5s"];
    let on_time = Gateway::start(&upstream.url, &store, &flags).await;
    for offset in ["-10m", "+10m"] {
        let skewed = Gateway::start_with_env(
            &upstream.url,
            &store,
            &flags,
            &skewed_clock::env(offset)
                .iter()
                .map(|(name, value)| (*name, value.as_str()))
                .collect::<Vec<_>>(),
        )
        .await;
        // Behind, the skewed gateway holds the key; ahead, it is the one asking.
        let (holder, asker) = if offset.starts_with('-') {
            (&skewed, &on_time)
        } else {
            (&on_time, &skewed)
        };
        let path = format!(
            "/charges/{}",
            if offset.starts_with('-') {
                "behind"
            } else {
                "ahead"
            }
        );
        let key = format!("clock{offset}");
        let headers = [
            ("authorization", "Bearer alice"),
            ("idempotency-key", key.as_str()),
        ];
        let url = format!("{}{path}?delay_ms=2000", holder.url);
        let first = tokio::spawn({
            let headers = headers.map(|(n, v)| (n, v.to_owned()));
            async move {
                let headers: Vec<(&str, &str)> =
                    headers.iter().map(|(n, v)| (*n, v.as_str())).collect();
                post(&url, &headers, b"{}").await
            }
        });
        upstream.reached(&path).await;
        let asked = post(
            &format!("{}{path}?delay_ms=2000", asker.url),
            &headers,
            b"{}",
        )
        .await;
        assert_eq!(
            asked.status, 409,
            "{offset}: the key is in flight by the database's clock: {asked:?}"
        );
        let first = first.await.unwrap();
        assert_eq!(first.status, 201, "{offset}: {first:?}");
        let again = post(
            &format!("{}{path}?delay_ms=2000", asker.url),
            &headers,
            b"{}",
        )
        .await;
        assert!(again.replayed, "{offset}: {again:?}");
        assert_eq!(upstream.executions(&path), 1, "{offset}: the key ran once");
    }
}
