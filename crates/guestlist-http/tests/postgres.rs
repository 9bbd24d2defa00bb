//! The Idempotency-Key suite on PostgreSQL: transactional mode (the claim committed first, and
//! the claim on the handler's transaction), and plain mode as the gateway uses it (one request
//! per statement, and requests batched into rounds).

mod common;

http_suite!(transactional, common::stores::Sql<sqlx::Postgres>);
http_suite!(plain, common::stores::PlainSql<sqlx::Postgres>);
http_suite!(locked, common::stores::LockedPostgres);
http_suite!(batched, common::stores::BatchedPostgres);

/// A round that fails fails each request in it with the cause, and the next round runs.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failed_round_fails_each_request_and_the_next_round_runs() {
    use std::time::Duration;

    use guestlist_core::{Begin, Completed, Fingerprint, IdempotencyKey, KeyStore, Scope};
    use guestlist_sqlx::{BatchedKeyStore, SqlKeyStore, StoredBody, StoredResponse};
    use guestlist_testkit::{Database, short_tag};

    let db = Database::<sqlx::Postgres>::open(8).await;
    let table = format!("keys_{}", short_tag("batched_failed_round"));
    db.exec(format!("DROP TABLE IF EXISTS {table}")).await;
    let store = SqlKeyStore::with_table(db.pool.clone(), &table).unwrap();
    let keys = BatchedKeyStore::new(store.clone());
    let scope = Scope::new("tenant:batched").unwrap();
    let fingerprint = Fingerprint::builder("POST", "/payments").body(b"{}");
    let lease = Duration::from_secs(30);
    let begin_all = |prefix: &'static str| {
        let (keys, scope, fingerprint) = (keys.clone(), scope.clone(), fingerprint);
        async move {
            let requests: Vec<_> = (0..20)
                .map(|n| {
                    let (keys, scope, fingerprint) = (keys.clone(), scope.clone(), fingerprint);
                    tokio::spawn(async move {
                        let key = IdempotencyKey::new(format!("{prefix}-{n}")).unwrap();
                        let begin = keys.begin(&scope, &key, &fingerprint, lease).await;
                        (key, begin)
                    })
                })
                .collect();
            let mut answers = Vec::new();
            for request in requests {
                answers.push(request.await.unwrap());
            }
            answers
        }
    };

    for (_, begin) in begin_all("before-migrate").await {
        let err = begin.expect_err("no table, no claim");
        assert!(
            err.to_string()
                .contains(&format!("table {table} does not exist")),
            "the cause reaches every request: {err}"
        );
    }

    store.migrate().await.unwrap();
    let response = StoredResponse {
        status: 201,
        headers: vec![],
        body: StoredBody::Bytes(b"{\"ok\":true}".to_vec()),
    };
    for (key, begin) in begin_all("after-migrate").await {
        let Ok(Begin::Run { attempt }) = begin else {
            panic!("a new key runs: {begin:?}");
        };
        let completed = keys.complete(&scope, &key, attempt, &response).await;
        assert_eq!(completed.unwrap(), Completed::Stored);
        let again = keys.begin(&scope, &key, &fingerprint, lease).await.unwrap();
        assert_eq!(again, Begin::Replay(response.clone()));
    }
    assert_eq!(db.scalar(format!("SELECT count(*) FROM {table}")).await, 20);
}
