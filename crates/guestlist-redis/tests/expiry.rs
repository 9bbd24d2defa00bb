//! Keys expire after the retention on their own: Redis needs no purge.

use std::time::Duration;

use guestlist_core::{Fingerprint, IdempotencyKey, KeyClaim, KeyStore, Retention, Scope};
use guestlist_redis::RedisKeyStore;

#[tokio::test]
async fn a_key_is_forgotten_after_the_retention() {
    let url = std::env::var("GUESTLIST_TEST_REDIS_URL")
        .unwrap_or_else(|_| "redis://127.0.0.1:6379".into());
    let retention = Retention::new(Duration::from_secs(2), Duration::from_secs(2)).unwrap();
    let keys = RedisKeyStore::connect(&url)
        .await
        .unwrap_or_else(|err| panic!("{err}: run scripts/test.sh, which starts Redis"))
        .prefix(format!("gltest:expiry:{}", std::process::id()))
        .retention(retention);
    let scope = Scope::from_credentials(b"Bearer alice");
    let key = IdempotencyKey::new("expires").unwrap();
    let fingerprint = Fingerprint::builder("POST", "/payments").body(b"{}");
    let lease = Duration::from_millis(500);

    assert!(matches!(
        keys.claim(&scope, &key, &fingerprint, lease).await.unwrap(),
        KeyClaim::Run { .. }
    ));
    assert!(
        matches!(
            keys.claim(&scope, &key, &fingerprint, lease).await.unwrap(),
            KeyClaim::InFlight { .. }
        ),
        "within the lease the key is held"
    );
    tokio::time::sleep(Duration::from_millis(2300)).await;
    let again = keys.claim(&scope, &key, &fingerprint, lease).await.unwrap();
    assert!(
        matches!(again, KeyClaim::Run { attempt } if attempt.number() == 1),
        "expired, so new again: {again:?}"
    );
}

#[tokio::test]
async fn an_unreachable_redis_says_what_to_check() {
    let err = RedisKeyStore::connect("redis://127.0.0.1:1")
        .await
        .unwrap_err();
    assert!(err.to_string().contains("check that Redis runs"), "{err}");
}
