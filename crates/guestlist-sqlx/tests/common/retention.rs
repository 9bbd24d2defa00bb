//! Retention: what the purge deletes and keeps, while claims go on, and what operators count. Each counts effects, not calls.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Duration;

use guestlist_sqlx::sqlx;
use guestlist_sqlx::{
    Fingerprint, IdempotencyKey, KeyClaim, KeyStore, Purged, Purger, Retention, Scope, SqlKeyStore,
    StoredBody, StoredResponse,
};

use super::harness::{Harness, handler, id};
use guestlist_testkit::Fixture;
use guestlist_testkit::metrics::{counters, recorder, sum};

use super::harness::{DAY, HOUR, deliver, week};

pub async fn purge_removes_only_rows_older_than_retention<DB: Fixture>(name: &str) {
    let h = Harness::<DB>::new(name).await;
    let table = h.inbox.table().to_string();
    for (message, age) in [
        ("eight_days", 8 * DAY),
        ("six_days", 6 * DAY),
        ("an_hour", HOUR),
    ] {
        h.exec(format!(
            "INSERT INTO {table} (handler, message_id, seen_at) VALUES ('warehouse', '{message}', {})",
            DB::ago(age.as_secs() as i64)
        ))
        .await;
    }
    deliver(&h, &handler("warehouse"), &id("just_now")).await;

    let purge = h.inbox.purge(week());
    assert_eq!(purge.count(&h.pool).await.unwrap(), 1);
    assert_eq!(purge.run(&h.pool).await.unwrap(), Purged::Deleted(1));
    assert_eq!(h.inbox_rows().await, 3, "six days, an hour and now remain");
    assert!(
        !deliver(&h, &handler("warehouse"), &id("six_days")).await,
        "a row younger than the retention still stops its duplicate"
    );
}

pub async fn a_row_written_old_during_a_purge_is_purged_too<DB: Fixture>(name: &str) {
    let h = Arc::new(Harness::<DB>::new(name).await);
    let table = h.inbox.table().to_string();
    for n in 0..10 {
        h.exec(format!(
            "INSERT INTO {table} (handler, message_id, seen_at) VALUES ('warehouse', 'old-{n}', {})",
            DB::ago((8 * DAY).as_secs() as i64 + 60 * (10 - n))
        ))
        .await;
    }
    deliver(&h, &handler("warehouse"), &id("young")).await;

    // After the first batch, a row older than everything the purge has deleted so far appears
    // (a backfill, an import): batches that resume where the last one stopped would pass it.
    let written = Arc::new(AtomicBool::new(false));
    let progress = {
        let (h, written, table) = (h.clone(), written.clone(), table.clone());
        move |_total: u64| {
            if !written.swap(true, Ordering::SeqCst) {
                let insert = format!(
                    "INSERT INTO {table} (handler, message_id, seen_at) VALUES ('warehouse', 'late', {})",
                    DB::ago((10 * DAY).as_secs() as i64)
                );
                tokio::task::block_in_place(|| {
                    tokio::runtime::Handle::current().block_on(h.exec(insert))
                });
            }
        }
    };
    let purged = h
        .inbox
        .purge(week())
        .batch_size(3)
        .pause(Duration::ZERO)
        .run_with_progress(&h.pool, progress)
        .await
        .unwrap();
    assert!(written.load(Ordering::SeqCst));
    assert_eq!(
        purged,
        Purged::Deleted(11),
        "the ten old rows and the late one"
    );
    assert_eq!(h.inbox_rows().await, 1, "only the young row is left");
}

pub async fn claims_succeed_while_a_million_rows_are_purged<DB: Fixture>(name: &str) {
    const ROWS: u64 = 1_000_000;
    let h = Arc::new(Harness::<DB>::new(name).await);
    let table = h.inbox.table().to_string();
    h.exec(DB::bulk_old_rows(&table, ROWS, (8 * DAY).as_secs() as i64))
        .await;
    assert_eq!(h.inbox_rows().await, ROWS as i64);

    let deleted = Arc::new(AtomicU64::new(0));
    let finished = Arc::new(AtomicBool::new(false));
    let purge = {
        let (h, deleted, finished) = (h.clone(), deleted.clone(), finished.clone());
        tokio::spawn(async move {
            let result = h
                .inbox
                .purge(week())
                .batch_size(5_000)
                .run_with_progress(&h.pool, |total| deleted.store(total, Ordering::SeqCst))
                .await;
            finished.store(true, Ordering::SeqCst);
            result
        })
    };
    while deleted.load(Ordering::SeqCst) == 0 {
        tokio::time::sleep(Duration::from_millis(5)).await;
    }

    // A second purger meanwhile: where sessions can lock, it steps aside.
    if DB::PURGE_LOCK {
        let second = h.inbox.purge(week()).run(&h.pool).await.unwrap();
        assert_eq!(second, Purged::Busy, "only one purger at a time");
    }

    let warehouse = handler("warehouse");
    let mut during = 0;
    let mut claims = 0;
    while !finished.load(Ordering::SeqCst) {
        let event = id(&format!("live-{claims}"));
        assert!(
            deliver(&h, &warehouse, &event).await,
            "a live claim is fresh"
        );
        claims += 1;
        if !finished.load(Ordering::SeqCst) {
            during += 1;
        }
    }
    assert_eq!(
        purge.await.unwrap().unwrap(),
        Purged::Deleted(ROWS),
        "every old row went"
    );
    assert!(
        during > 0,
        "live claims completed while the purge was still running"
    );
    assert_eq!(
        h.inbox_rows().await,
        claims,
        "every live claim survived the purge"
    );
    assert_eq!(h.all_picks().await, claims);
}

pub async fn stats_count_each_handlers_rows_and_the_oldest<DB: Fixture>(name: &str) {
    let h = Harness::<DB>::new(name).await;
    let table = h.inbox.table().to_string();
    h.exec(format!(
        "INSERT INTO {table} (handler, message_id, seen_at) VALUES ('warehouse', 'old', {})",
        DB::ago((8 * DAY).as_secs() as i64)
    ))
    .await;
    for event in ["a", "b"] {
        deliver(&h, &handler("warehouse"), &id(event)).await;
    }
    for event in ["a", "c"] {
        deliver(&h, &handler("billing"), &id(event)).await;
    }

    let stats = h.inbox.stats(&h.pool).await.unwrap();
    assert_eq!(stats.rows, 5);
    let per_handler: Vec<(&str, u64)> = stats
        .handlers
        .iter()
        .map(|h| (h.handler.as_str(), h.rows))
        .collect();
    assert_eq!(per_handler, [("billing", 2), ("warehouse", 3)]);
    let oldest = stats.oldest.expect("an oldest row").as_secs_f64();
    assert!(
        (oldest - (8 * DAY).as_secs_f64()).abs() < 120.0,
        "the oldest row is eight days old: {oldest} s"
    );
    assert!(
        stats.handlers[0].oldest.unwrap() < HOUR,
        "billing's rows are new"
    );
    assert!(stats.size.table_bytes.unwrap() > 0, "{:?}", stats.size);
    assert!(stats.size.index_bytes.unwrap() > 0, "{:?}", stats.size);
    assert!(stats.bytes_per_row().unwrap() > 0.0);

    assert_eq!(
        h.inbox.purge(week()).run(&h.pool).await.unwrap(),
        Purged::Deleted(1)
    );
    let after = h.inbox.stats(&h.pool).await.unwrap();
    assert_eq!(after.rows, 4);
    assert!(after.oldest.unwrap() < HOUR, "the old row went");
    if stats.size.dead_rows.is_some() {
        // PostgreSQL counts the purged row as dead until vacuum; its statistics arrive within
        // a second or so of the purge's commit.
        let mut dead = 0;
        for _ in 0..100 {
            dead = h
                .inbox
                .stats(&h.pool)
                .await
                .unwrap()
                .size
                .dead_rows
                .unwrap();
            if dead > 0 {
                break;
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        assert_eq!(dead, 1, "the purged row is dead until vacuumed");
    }
}

pub async fn purger_task_purges_in_the_background<DB: Fixture>(name: &str) {
    recorder();
    let h = Harness::<DB>::new(name).await;
    let table = h.inbox.table().to_string();
    h.exec(DB::bulk_old_rows(&table, 10, (8 * DAY).as_secs() as i64))
        .await;
    deliver(&h, &handler("warehouse"), &id("young")).await;
    // Two dead letters, a year old and new: the dead letters' own retention takes the old.
    h.exec(format!(
        "INSERT INTO {table}_dead (handler, message_id, reason, deliveries, dead_at) \
         VALUES ('warehouse', 'long-dead', 'boom', 5, 1)"
    ))
    .await;
    let copy = guestlist_sqlx::DeadCopy {
        topic: None,
        key: None,
        headers: &[],
        body: b"{}",
    };
    h.inbox
        .record_dead(
            &h.pool,
            &handler("warehouse"),
            &id("just-dead"),
            "boom",
            5,
            copy,
        )
        .await
        .unwrap();

    let purger = Purger::new(h.pool.clone(), &h.inbox, week())
        .every(Duration::from_millis(50))
        .dead_letters(&h.inbox, Duration::from_secs(30 * 86_400))
        .spawn();
    let gone = tokio::time::timeout(Duration::from_secs(60), async {
        while h.inbox_rows().await > 1 || h.inbox.dead_count(&h.pool).await.unwrap() > 1 {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    })
    .await;
    purger.shutdown().await;
    assert!(gone.is_ok(), "the purger deleted the old rows");
    assert_eq!(h.inbox_rows().await, 1, "the young row stays");
    let left = h.inbox.dead_letters(&h.pool, 10).await.unwrap();
    assert_eq!(left.len(), 1, "{left:?}");
    assert_eq!(left[0].message_id, "just-dead", "the new dead letter stays");
    // When its last pass ended, and how often one starts: what the purge-behind alert reads.
    let labels = [("table", table.as_str())];
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs_f64();
    let last = guestlist_testkit::metrics::gauge(
        "guestlist_purge_last_success_timestamp_seconds",
        &labels,
    )
    .expect("a pass ended");
    assert!((now - last).abs() < 60.0, "just now: {last} against {now}");
    assert_eq!(
        guestlist_testkit::metrics::gauge("guestlist_purge_interval_seconds", &labels),
        Some(0.05)
    );
}

pub async fn claims_and_purged_rows_are_counted_in_metrics<DB: Fixture>(name: &str) {
    recorder();
    let h = Harness::<DB>::new(name).await;
    let counted = handler(&format!("counted_{}", DB::LABEL));
    for _ in 0..3 {
        deliver(&h, &counted, &id("evt_9f3k")).await;
    }
    let batch = ["evt_9f3k", "evt_b", "evt_c"].map(id);
    let done = h
        .inbox
        .process_batch(&h.pool, &counted, &batch, async |_, _| {
            Ok::<_, sqlx::Error>(())
        })
        .await
        .unwrap();
    assert_eq!(done.fresh.len(), 2);
    // Asking is no claim: counted nowhere, changing nothing.
    assert!(
        h.inbox
            .holds(&h.pool, &counted, &id("evt_b"))
            .await
            .unwrap()
    );
    assert!(
        !h.inbox
            .holds(&h.pool, &counted, &id("evt_never"))
            .await
            .unwrap()
    );
    h.inbox.check(&h.pool, &counted).await.unwrap();
    assert!(
        !h.inbox
            .holds(&h.pool, &counted, &id("evt_never"))
            .await
            .unwrap()
    );
    let recorded = counters();
    let claims = |outcome| {
        sum(
            &recorded,
            "guestlist_inbox_claims_total",
            &[("handler", counted.as_str()), ("outcome", outcome)],
        )
    };
    assert_eq!((claims("fresh"), claims("duplicate")), (3, 3));
    let processed = |outcome| {
        sum(
            &recorded,
            "guestlist_inbox_processed_total",
            &[("handler", counted.as_str()), ("outcome", outcome)],
        )
    };
    // Three single deliveries (one committed, two duplicates) and one batch that committed.
    assert_eq!((processed("committed"), processed("duplicate")), (2, 2));

    let table = h.inbox.table().to_string();
    h.exec(DB::bulk_old_rows(&table, 7, (8 * DAY).as_secs() as i64))
        .await;
    h.inbox.purge(week()).run(&h.pool).await.unwrap();
    assert_eq!(
        sum(
            &counters(),
            "guestlist_purged_total",
            &[("table", table.as_str())]
        ),
        7
    );
}

pub async fn a_cancelled_purge_releases_its_lock<DB: Fixture>(name: &str) {
    let h = Arc::new(Harness::<DB>::new(name).await);
    let table = h.inbox.table().to_string();
    h.exec(DB::bulk_old_rows(
        &table,
        100_000,
        (8 * DAY).as_secs() as i64,
    ))
    .await;
    let started = Arc::new(AtomicBool::new(false));
    let purge = {
        let (h, started) = (h.clone(), started.clone());
        tokio::spawn(async move {
            h.inbox
                .purge(week())
                .batch_size(1_000)
                .pause(Duration::from_millis(50))
                .run_with_progress(&h.pool, |_| started.store(true, Ordering::SeqCst))
                .await
        })
    };
    while !started.load(Ordering::SeqCst) {
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    purge.abort(); // a timeout, a shutdown: the purge future is dropped mid-run
    assert!(purge.await.unwrap_err().is_cancelled());

    // The next purge gets the lock (at once, or as soon as the server has seen the session go).
    let next = tokio::time::timeout(Duration::from_secs(30), async {
        loop {
            match h.inbox.purge(week()).run(&h.pool).await.unwrap() {
                Purged::Busy => tokio::time::sleep(Duration::from_millis(50)).await,
                deleted => return deleted,
            }
        }
    })
    .await
    .expect("the cancelled purge's lock was released");
    assert!(matches!(next, Purged::Deleted(n) if n > 0));
    assert_eq!(h.inbox_rows().await, 0);
}

pub async fn a_retention_shorter_than_the_horizon_is_refused_at_start_up<DB: Fixture>(name: &str) {
    let h = Harness::<DB>::new(name).await;
    let err = Retention::new(24 * HOUR, 72 * HOUR).unwrap_err();
    assert!(
        err.to_string()
            .contains("shorter than the redelivery horizon"),
        "{err}"
    );
    // A purger can only be built from a retention that passed that check; the inbox is untouched.
    deliver(&h, &handler("warehouse"), &id("evt_9f3k")).await;
    assert_eq!(h.inbox_rows().await, 1);
}

/// A key table of the harness's own holding each of `names`, completed.
async fn completed_keys<DB: Fixture>(h: &Harness<DB>, names: &[&str]) -> SqlKeyStore<DB> {
    let keys = SqlKeyStore::with_table(h.pool.clone(), &format!("keys_{}", h.tag)).unwrap();
    h.exec(format!("DROP TABLE IF EXISTS {}", keys.table()))
        .await;
    keys.migrate().await.unwrap();
    let response = StoredResponse {
        status: 201,
        headers: vec![],
        body: StoredBody::Bytes(b"{}".to_vec()),
    };
    for key in names {
        let key = IdempotencyKey::new(*key).unwrap();
        let KeyClaim::Run { attempt } = keys.claim(&alice(), &key, &payment(), HOUR).await.unwrap()
        else {
            panic!("a new key runs");
        };
        keys.complete(&alice(), &key, attempt, &response)
            .await
            .unwrap();
    }
    keys
}

fn alice() -> Scope {
    Scope::from_credentials(b"Bearer alice")
}

fn payment() -> Fingerprint {
    Fingerprint::builder("POST", "/payments").body(b"{}")
}

pub async fn old_idempotency_keys_are_purged_and_young_ones_stay<DB: Fixture>(name: &str) {
    let h = Harness::<DB>::new(name).await;
    let keys = completed_keys(&h, &["old", "young"]).await;
    let (scope, fingerprint) = (alice(), payment());
    h.exec(format!(
        "UPDATE {} SET created_at = {} WHERE idempotency_key = 'old'",
        keys.table(),
        DB::ago(25 * 3600)
    ))
    .await;
    // Keys live 24 hours: clients retry within that day.
    let day = Retention::new(24 * HOUR, 24 * HOUR).unwrap();
    assert_eq!(
        keys.purge(day).run(&h.pool).await.unwrap(),
        Purged::Deleted(1)
    );
    let young = IdempotencyKey::new("young").unwrap();
    assert!(matches!(
        keys.claim(&scope, &young, &fingerprint, HOUR)
            .await
            .unwrap(),
        KeyClaim::Replay(_)
    ));
    let old = IdempotencyKey::new("old").unwrap();
    assert!(
        matches!(
            keys.claim(&scope, &old, &fingerprint, HOUR).await.unwrap(),
            KeyClaim::Run { .. }
        ),
        "a purged key is new again"
    );
}

/// A key row a live request's transaction holds (a retry taking over an old key, say) is left to
/// it: the purge deletes the other old rows without waiting, and the held one on its next turn.
/// PostgreSQL's: where one writer holds the whole file (SQLite) or a delete waits for row locks
/// (MySQL), this does not apply.
pub async fn an_old_key_a_live_request_holds_is_skipped_not_waited_for(name: &str) {
    type DB = sqlx::Postgres;
    let h = Harness::<DB>::new(name).await;
    let keys = completed_keys(&h, &["old", "held", "young"]).await;
    h.exec(format!(
        "UPDATE {} SET created_at = {} WHERE idempotency_key IN ('old', 'held')",
        keys.table(),
        DB::ago(25 * 3600)
    ))
    .await;
    let mut live = h.pool.begin().await.unwrap();
    let held = sqlx::query(sqlx::AssertSqlSafe(format!(
        "SELECT 1 FROM {} WHERE idempotency_key = 'held' FOR UPDATE",
        keys.table()
    )))
    .fetch_all(&mut *live)
    .await
    .unwrap();
    assert_eq!(held.len(), 1);
    let day = Retention::new(24 * HOUR, 24 * HOUR).unwrap();
    let purged = tokio::time::timeout(Duration::from_secs(10), keys.purge(day).run(&h.pool))
        .await
        .expect("the purge waited for the held row")
        .unwrap();
    assert_eq!(purged, Purged::Deleted(1), "the old row nobody holds goes");
    live.commit().await.unwrap();
    assert_eq!(
        keys.purge(day).run(&h.pool).await.unwrap(),
        Purged::Deleted(1),
        "the held row goes once let go"
    );
    assert_eq!(
        h.scalar(format!("SELECT count(*) FROM {}", keys.table()))
            .await,
        1
    );
}
