//! ReplayCache on a real SQLite key store: replays after the first come from memory, a
//! different request still gets 422, and nothing is remembered when the cache is off.

use std::time::Duration;

use guestlist_core::{
    Begin, Completed, Fingerprint, IdempotencyKey, KeyStore, Scope, StoredBody, StoredResponse,
};
use guestlist_http::ReplayCache;
use guestlist_sqlx::SqlKeyStore;
use guestlist_testkit::Database;

const LEASE: Duration = Duration::from_secs(30);

async fn stored(
    keys: &SqlKeyStore<sqlx::Sqlite>,
    scope: &Scope,
    key: &IdempotencyKey,
    fingerprint: &Fingerprint,
) {
    let Begin::Run { attempt } = keys.begin(scope, key, fingerprint, LEASE).await.unwrap() else {
        panic!("a new key runs")
    };
    let response = StoredResponse {
        status: 201,
        headers: vec![("content-type".into(), b"application/json".to_vec())],
        body: StoredBody::Bytes(b"{\"id\":\"ch_1\"}".to_vec()),
    };
    assert_eq!(
        keys.complete(scope, key, attempt, &response).await.unwrap(),
        Completed::Stored
    );
}

#[tokio::test]
async fn replays_after_the_first_come_from_memory() {
    let db = Database::<sqlx::Sqlite>::open(2).await;
    let keys = SqlKeyStore::with_table(db.pool.clone(), "cache_keys").unwrap();
    keys.migrate().await.unwrap();
    let (scope, key) = (
        Scope::new("tenant").unwrap(),
        IdempotencyKey::new("k-1").unwrap(),
    );
    let fingerprint = Fingerprint::builder("POST", "/charges").body(b"{}");
    stored(&keys, &scope, &key, &fingerprint).await;

    let cached = ReplayCache::new(keys.clone(), 1 << 20, Duration::from_secs(60));
    let first = cached
        .begin(&scope, &key, &fingerprint, LEASE)
        .await
        .unwrap();
    assert!(
        matches!(first, Begin::Replay(_)),
        "the store replays it: {first:?}"
    );
    // Gone from the store: a replay now can only come from memory.
    assert!(keys.evict(&scope, &key).await.unwrap());
    let second = cached
        .begin(&scope, &key, &fingerprint, LEASE)
        .await
        .unwrap();
    assert_eq!(first, second, "the same response, from memory");
    let other = Fingerprint::builder("POST", "/charges").body(b"{\"amount\":2}");
    assert_eq!(
        cached.begin(&scope, &key, &other, LEASE).await.unwrap(),
        Begin::Mismatch,
        "another request with the key gets 422 from memory too"
    );
    let other_scope = Scope::new("someone-else").unwrap();
    assert!(
        matches!(
            cached
                .begin(&other_scope, &key, &fingerprint, LEASE)
                .await
                .unwrap(),
            Begin::Run { .. }
        ),
        "memory never crosses scopes"
    );
}

#[tokio::test]
async fn an_expired_or_disabled_cache_asks_the_store() {
    let db = Database::<sqlx::Sqlite>::open(2).await;
    let keys = SqlKeyStore::with_table(db.pool.clone(), "cache_keys").unwrap();
    keys.migrate().await.unwrap();
    let (scope, fingerprint) = (
        Scope::new("tenant").unwrap(),
        Fingerprint::builder("POST", "/x").body(b""),
    );
    for (name, cache) in [
        (
            "off",
            ReplayCache::new(keys.clone(), 0, Duration::from_secs(60)),
        ),
        (
            "expired",
            ReplayCache::new(keys.clone(), 1 << 20, Duration::from_millis(50)),
        ),
    ] {
        let key = IdempotencyKey::new(format!("k-{name}")).unwrap();
        stored(&keys, &scope, &key, &fingerprint).await;
        assert!(matches!(
            cache
                .begin(&scope, &key, &fingerprint, LEASE)
                .await
                .unwrap(),
            Begin::Replay(_)
        ));
        keys.evict(&scope, &key).await.unwrap();
        tokio::time::sleep(Duration::from_millis(100)).await;
        assert!(
            matches!(
                cache
                    .begin(&scope, &key, &fingerprint, LEASE)
                    .await
                    .unwrap(),
                Begin::Run { .. }
            ),
            "{name}: the store decides, and the evicted key runs again"
        );
    }
}
