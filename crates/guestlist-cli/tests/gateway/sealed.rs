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

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hashed_keys_are_unreadable_in_the_table_and_operators_find_them_by_the_raw_key() {
    let upstream = Upstream::start().await;
    let store = Store::postgres(&guestlist_testkit::short_tag("gateway_hashed_keys"), 1).await;
    let secret = "9b".repeat(32);
    let env = [("GUESTLIST_KEY_HASHING_SECRET", secret.as_str())];
    let gateway = Gateway::start_with_env(&upstream.url, &store, &[], &env).await;
    let url = format!("{}/charges", gateway.url);
    let headers = [
        ("authorization", "Bearer a"),
        ("idempotency-key", "order-77"),
    ];
    assert_eq!(post(&url, &headers, b"{}").await.status, 201);
    assert!(post(&url, &headers, b"{}").await.replayed);

    let Store::Postgres { url: db, table, .. } = &store else {
        unreachable!()
    };
    let pool = guestlist::sqlx::PgPool::connect(db).await.unwrap();
    let stored: String = guestlist::sqlx::query_scalar(guestlist::sqlx::AssertSqlSafe(format!(
        "SELECT idempotency_key FROM {table}"
    )))
    .fetch_one(&pool)
    .await
    .unwrap();
    assert!(
        stored.starts_with("hmac:") && !stored.contains("order-77"),
        "{stored}"
    );

    // The operator looks the key up by the raw key, with the scheme in any case.
    let inspect = |secret: Option<&str>| {
        let mut command = std::process::Command::new(env!("CARGO_BIN_EXE_guestlist"));
        command
            .args([
                "keys",
                "inspect",
                "--authorization",
                "bearer a",
                "--key",
                "order-77",
            ])
            .args(store.args())
            .env_remove("GUESTLIST_DATABASE_URL")
            .env_remove("GUESTLIST_KEY_HASHING_SECRET");
        if let Some(secret) = secret {
            command.env("GUESTLIST_KEY_HASHING_SECRET", secret);
        }
        let output = command.output().unwrap();
        (
            output.status.success(),
            format!(
                "{}{}",
                String::from_utf8_lossy(&output.stdout),
                String::from_utf8_lossy(&output.stderr)
            ),
        )
    };
    let (found, out) = inspect(Some(&secret));
    assert!(found && out.contains("stored: status 201"), "{out}");
    let (found, out) = inspect(None);
    assert!(
        !found && out.contains("no key order-77"),
        "without the secret: {out}"
    );
}
