//! The Idempotency-Key suite on PostgreSQL: transactional mode (the claim committed first, and
//! the claim on the handler's transaction), and plain mode as the gateway uses it (one request
//! per statement, and requests batched into rounds).

mod common;

http_suite!(transactional, common::stores::Sql<sqlx::Postgres>);
http_suite!(plain, common::stores::PlainSql<sqlx::Postgres>);
http_suite!(locked, common::stores::LockedPostgres);
http_suite!(batched, common::stores::Batched<sqlx::Postgres>);
http_suite!(sealed, common::stores::SealedPostgres);
http_wire_faults!(
    transactional_wire,
    common::stores::Sql<sqlx::Postgres>,
    restart
);
http_wire_faults!(
    plain_wire,
    common::stores::PlainSql<sqlx::Postgres>,
    restart
);
http_wire_faults!(locked_wire, common::stores::LockedPostgres, restart);
http_wire_faults!(
    batched_wire,
    common::stores::Batched<sqlx::Postgres>,
    restart
);

/// With sealing and key hashing on, the key table holds no response body and no client key an
/// operator could read, and retries still get the response byte for byte.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sealed_bodies_are_unreadable_at_rest_and_replay_whole() {
    use common::client::{Call, Server};
    use common::stores::{SealedPostgres, Settings, Store};

    let store = SealedPostgres::open("sealed_at_rest").await;
    let state = common::app::AppState::default();
    let server = Server::start(store.router(state.clone(), &Settings::default())).await;
    let call = Call::new("sealed-1");
    let first = call.send(&server.base).await;
    let again = call.send(&server.base).await;
    assert_eq!(first.status, 201);
    assert!(again.replayed());
    assert_eq!(again.body, first.body, "byte for byte");
    let at_rest = store.bodies_at_rest().await;
    assert_eq!(at_rest.len(), 1);
    let plain = &first.body[..first.body.len().min(12)];
    assert!(
        !at_rest[0].windows(plain.len()).any(|w| w == plain),
        "the stored body is not the response"
    );
    assert!(
        at_rest[0].starts_with(b"glseal1\x03new"),
        "sealed with the newest key, by id"
    );
    let keys = store.keys_at_rest().await;
    assert_eq!(keys.len(), 1);
    assert!(
        keys[0].starts_with("hmac:") && !keys[0].contains("sealed-1"),
        "the client's key is stored only as a keyed hash: {}",
        keys[0]
    );
}

/// One test per store and point at which the client hangs up.
macro_rules! hang_up {
    ($($m:ident: $store:ty),* $(,)?) => {$(
        mod $m {
            use guestlist_testkit::hang_up::HangUp;
            use super::common::hang_up::a_client_that_hangs_up_never_strands_its_key;
            hang_up!(@points $m, $store;
                before_the_claim: BeforeTheClaim,
                during_the_claim_commit: DuringTheClaimCommit,
                during_the_handler: DuringTheWork,
                during_the_answer_commit: DuringTheAnswerCommit,
            );
        }
    )*};
    (@points $m:ident, $store:ty; $($test:ident: $point:ident),* $(,)?) => {$(
        #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
        async fn $test() {
            let name = concat!(stringify!($m), "_", stringify!($test));
            a_client_that_hangs_up_never_strands_its_key::<$store>(name, HangUp::$point).await;
        }
    )*};
}

hang_up!(
    hang_up_transactional: crate::common::stores::Sql<sqlx::Postgres>,
    hang_up_plain: crate::common::stores::PlainSql<sqlx::Postgres>,
    hang_up_locked: crate::common::stores::LockedPostgres,
    hang_up_batched: crate::common::stores::Batched<sqlx::Postgres>,
);

/// A round that fails fails each request in it with the cause, and the next round runs.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failed_round_fails_each_request_and_the_next_round_runs() {
    use std::time::Duration;

    use guestlist_core::{Completed, Fingerprint, IdempotencyKey, KeyClaim, KeyStore, Scope};
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
                        let begin = keys.claim(&scope, &key, &fingerprint, lease).await;
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
        let Ok(KeyClaim::Run { attempt }) = begin else {
            panic!("a new key runs: {begin:?}");
        };
        let completed = keys.complete(&scope, &key, attempt, &response).await;
        assert_eq!(completed.unwrap(), Completed::Stored);
        let again = keys.claim(&scope, &key, &fingerprint, lease).await.unwrap();
        assert_eq!(again, KeyClaim::Replay(response.clone()));
    }
    assert_eq!(db.scalar(format!("SELECT count(*) FROM {table}")).await, 20);
}

/// A request that goes away while its claim waits for a round leaves no claim behind: dropped
/// before its round runs, it claims nothing; dropped while its round runs, its row is released.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_claim_whose_request_went_away_is_not_left_locked() {
    use std::time::Duration;

    use guestlist_core::{Fingerprint, IdempotencyKey, KeyClaim, KeyStore, Scope};
    use guestlist_sqlx::{BatchedKeyStore, SqlKeyStore};
    use guestlist_testkit::{Database, short_tag};
    use sqlx::Connection;

    let db = Database::<sqlx::Postgres>::open(8).await;
    let table = format!("keys_{}", short_tag("batched_went_away"));
    db.exec(format!("DROP TABLE IF EXISTS {table}")).await;
    let store = SqlKeyStore::with_table(db.pool.clone(), &table).unwrap();
    store.migrate().await.unwrap();
    let keys = BatchedKeyStore::new(store);
    let scope = Scope::new("tenant:went-away").unwrap();
    let fingerprint = Fingerprint::builder("POST", "/payments").body(b"{}");
    let lease = Duration::from_secs(30);
    let begin = |key: &'static str| {
        let (keys, scope) = (keys.clone(), scope.clone());
        async move {
            let key = IdempotencyKey::new(key).unwrap();
            keys.claim(&scope, &key, &fingerprint, lease).await
        }
    };

    // Hold the table so that the first round blocks with the first claim in it.
    let mut holder = sqlx::PgConnection::connect(&db.url).await.unwrap();
    let mut hold = holder.begin().await.unwrap();
    sqlx::query(sqlx::AssertSqlSafe(format!(
        "LOCK TABLE {table} IN ACCESS EXCLUSIVE MODE"
    )))
    .execute(&mut *hold)
    .await
    .unwrap();
    let in_round = tokio::time::timeout(Duration::from_millis(400), begin("in-round")).await;
    assert!(
        in_round.is_err(),
        "the round is blocked, the request gives up"
    );
    let queued = tokio::time::timeout(Duration::from_millis(400), begin("queued")).await;
    assert!(queued.is_err(), "queued behind it, the request gives up");
    hold.commit().await.unwrap();

    // Rounds run one after another: once a later claim is answered, the earlier rounds and
    // their releases are done.
    let probe = begin("probe").await.unwrap();
    assert!(matches!(probe, KeyClaim::Run { .. }), "{probe:?}");
    assert_eq!(
        db.scalar(format!("SELECT count(*) FROM {table}")).await,
        1,
        "only the probe's claim is there"
    );
    for key in ["in-round", "queued"] {
        let again = begin(key).await.unwrap();
        assert!(
            matches!(again, KeyClaim::Run { .. }),
            "a retry of {key} runs at once: {again:?}"
        );
    }
}

/// Rounds keep finding their rows by key as the table grows: a plan cached while the table was
/// small scanned the whole table for the answers in each round, and every round slowed down as
/// keys accumulated. Counted by PostgreSQL's own statistics: after many rounds on a small
/// table and 100,000 more keys, further rounds scan the table zero times.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rounds_find_their_rows_by_key_however_large_the_table() {
    use std::time::Duration;

    use guestlist_core::{Completed, Fingerprint, IdempotencyKey, KeyClaim, KeyStore, Scope};
    use guestlist_sqlx::{BatchedKeyStore, SqlKeyStore, StoredBody, StoredResponse};
    use guestlist_testkit::{Database, short_tag};

    // One connection: every round runs on it, so a plan it cached would be used again.
    let db = Database::<sqlx::Postgres>::open(1).await;
    let table = format!("keys_{}", short_tag("batched_plan"));
    db.exec(format!("DROP TABLE IF EXISTS {table}")).await;
    let store = SqlKeyStore::with_table(db.pool.clone(), &table).unwrap();
    store.migrate().await.unwrap();
    let keys = BatchedKeyStore::new(store);
    let scope = Scope::new("tenant:plan").unwrap();
    let fingerprint = Fingerprint::builder("POST", "/payments").body(b"{}");
    let response = StoredResponse {
        status: 201,
        headers: vec![],
        body: StoredBody::Bytes(b"{}".to_vec()),
    };
    let claim_and_answer = |name: String| {
        let (keys, scope, response) = (keys.clone(), scope.clone(), response.clone());
        async move {
            let key = IdempotencyKey::new(name).unwrap();
            let lease = Duration::from_secs(30);
            let KeyClaim::Run { attempt } =
                keys.claim(&scope, &key, &fingerprint, lease).await.unwrap()
            else {
                panic!("a new key runs");
            };
            let stored = keys
                .complete(&scope, &key, attempt, &response)
                .await
                .unwrap();
            assert_eq!(stored, Completed::Stored);
        }
    };
    // Enough rounds on a small table for PostgreSQL to settle on a plan for them.
    for n in 0..12 {
        claim_and_answer(format!("small-{n}")).await;
    }
    db.exec(format!(
        "INSERT INTO {table} (scope, idempotency_key, fingerprint, token, status) \
         SELECT 'bulk', 'k' || n, '\\x00', n, 201 FROM generate_series(1, 100000) AS n"
    ))
    .await;
    // Statistics reach the shared view when the connection has been idle a moment: wait until
    // they count every insert so far.
    let stats = |inserted: i64| {
        let (db, table) = (&db, &table);
        async move {
            for _ in 0..60 {
                let counts: (i64, i64) = sqlx::query_as(sqlx::AssertSqlSafe(format!(
                    "SELECT n_tup_ins, seq_scan FROM pg_stat_user_tables WHERE relname = '{table}'"
                )))
                .fetch_one(&db.pool)
                .await
                .unwrap();
                if counts.0 >= inserted {
                    return counts.1;
                }
                tokio::time::sleep(Duration::from_millis(250)).await;
            }
            panic!("PostgreSQL's statistics never counted {inserted} inserts into {table}");
        }
    };
    let scans_before = stats(100_012).await;
    for n in 0..5 {
        claim_and_answer(format!("large-{n}")).await;
    }
    let scans_after = stats(100_017).await;
    assert_eq!(
        scans_after,
        scans_before,
        "rounds on a table of 100,000 keys scanned it {} times",
        scans_after - scans_before
    );
}

/// Ten thousand requests on one key: capped, bounded in memory, one execution.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ten_thousand_requests_on_one_key_are_capped() {
    common::waits::ten_thousand_requests_on_one_key_are_capped::<common::stores::Sql<sqlx::Postgres>>(
        "capped_ten_thousand",
    )
    .await;
}
