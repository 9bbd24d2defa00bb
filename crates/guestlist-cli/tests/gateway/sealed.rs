//! `--sealing-keys-file`: the key table holds no response body an operator could read.

use crate::harness::{Gateway, Store, Upstream, post};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sealed_bodies_are_unreadable_in_the_table_and_replay_whole() {
    let upstream = Upstream::start().await;
    let store = Store::postgres(&guestlist_testkit::short_tag("gateway_sealed_bodies"), 1).await;
    let dir = tempfile::tempdir().unwrap();
    let keys = dir.path().join("sealing-keys");
    std::fs::write(&keys, format!("2026-11:{}\n", "7e".repeat(32))).unwrap();
    let gateway = Gateway::start(
        &upstream.url,
        &store,
        &["--sealing-keys-file", keys.to_str().unwrap()],
    )
    .await;
    let url = format!("{}/charges", gateway.url);
    let headers = [("authorization", "Bearer a"), ("idempotency-key", "sealed")];
    let first = post(&url, &headers, b"{\"amount\":1200}").await;
    let again = post(&url, &headers, b"{\"amount\":1200}").await;
    assert_eq!(first.status, 201);
    assert!(again.replayed);
    assert_eq!(again.body, first.body, "byte for byte");

    let Store::Postgres { url: db, table, .. } = &store else {
        unreachable!()
    };
    let pool = guestlist::sqlx::PgPool::connect(db).await.unwrap();
    let at_rest: Vec<u8> = guestlist::sqlx::query_scalar(guestlist::sqlx::AssertSqlSafe(format!(
        "SELECT body FROM {table}"
    )))
    .fetch_one(&pool)
    .await
    .unwrap();
    assert!(
        at_rest.starts_with(b"glseal1\x072026-11"),
        "sealed, with its key's id"
    );
    let plain = &first.body[..first.body.len().min(12)];
    assert!(
        !at_rest.windows(plain.len()).any(|w| w == plain),
        "the upstream's answer is not readable in the table"
    );
}
