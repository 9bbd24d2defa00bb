//! The stories every backend must tell the same way. Each counts effects, not calls.

use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Duration;

use guestlist::sqlx::{self, Connection};
use guestlist::{
    Begin, Claim, Error, Fingerprint, HandlerName, IdempotencyKey, Inbox, MessageId, ProcessError,
    Processed, Purged, Purger, Retention, Schema, Scope, SqlKeyStore, StoredBody, StoredResponse,
};
use tokio::sync::Barrier;

use super::harness::{Harness, handler, id};
use guestlist_testkit::metrics::{counters, recorder, sum};
use guestlist_testkit::{Fixture, short_tag};

const HOUR: Duration = Duration::from_secs(3600);
const DAY: Duration = Duration::from_secs(24 * 3600);

/// A week, declared against Stripe's 72-hour horizon.
fn week() -> Retention {
    Retention::new(7 * DAY, 72 * HOUR).expect("a week covers 72 hours")
}

/// Delivers `event` to `handler` once, with the pick work; `true` when the work ran.
async fn deliver<DB: Fixture>(h: &Harness<DB>, handler: &HandlerName, event: &MessageId) -> bool {
    h.inbox
        .process(&h.pool, handler, event, h.pick(event))
        .await
        .expect("process")
        .ran()
}

pub async fn five_deliveries_five_acks_one_pick_task<DB: Fixture>(name: &str) {
    let h = Harness::<DB>::new(name).await;
    let warehouse = handler("warehouse");
    let event = id("evt_9f3k");
    let mut acks = 0;
    let mut ran = 0;
    for _ in 0..5 {
        ran += usize::from(deliver(&h, &warehouse, &event).await);
        acks += 1; // fresh or duplicate, the consumer acknowledges
    }
    assert_eq!((acks, ran), (5, 1));
    assert_eq!(
        h.picks_for(&event).await,
        1,
        "five deliveries, one pick task"
    );
    assert_eq!(h.inbox_rows().await, 1);
}

pub async fn a_second_event_id_makes_a_second_pick_task<DB: Fixture>(name: &str) {
    let h = Harness::<DB>::new(name).await;
    let warehouse = handler("warehouse");
    for _ in 0..3 {
        deliver(&h, &warehouse, &id("evt_9f3k")).await;
    }
    assert!(deliver(&h, &warehouse, &id("evt_7h2m")).await);
    assert_eq!(h.all_picks().await, 2, "a changed id is a new event");
}

pub async fn each_handler_runs_once_per_event<DB: Fixture>(name: &str) {
    let h = Harness::<DB>::new(name).await;
    let event = id("evt_9f3k");
    for _ in 0..2 {
        for name in ["warehouse", "email", "loyalty"] {
            deliver(&h, &handler(name), &event).await;
        }
    }
    assert_eq!(
        h.picks_for(&event).await,
        3,
        "each handler did the work once; none stole the event from another"
    );
    assert_eq!(h.inbox_rows().await, 3);
}

pub async fn rollback_releases_the_claim<DB: Fixture>(name: &str) {
    let h = Harness::<DB>::new(name).await;
    let warehouse = handler("warehouse");
    let event = id("evt_9f3k");

    let mut tx = h.begin().await;
    assert_eq!(
        h.inbox.claim(&mut tx, &warehouse, &event).await.unwrap(),
        Claim::Fresh
    );
    DB::exec(&mut tx, h.pick_sql(&event)).await.unwrap();
    tx.rollback().await.unwrap();
    assert_eq!(h.picks_for(&event).await, 0, "the work rolled back");
    assert_eq!(h.inbox_rows().await, 0, "the claim rolled back with it");

    let mut tx = h.begin().await;
    assert_eq!(
        h.inbox.claim(&mut tx, &warehouse, &event).await.unwrap(),
        Claim::Fresh,
        "the redelivery finds no row"
    );
    DB::exec(&mut tx, h.pick_sql(&event)).await.unwrap();
    tx.commit().await.unwrap();

    let mut tx = h.begin().await;
    assert_eq!(
        h.inbox.claim(&mut tx, &warehouse, &event).await.unwrap(),
        Claim::Duplicate
    );
    tx.rollback().await.unwrap();
    assert_eq!(h.picks_for(&event).await, 1);
}

pub async fn a_failing_handler_rolls_back_its_claim<DB: Fixture>(name: &str) {
    let h = Harness::<DB>::new(name).await;
    let warehouse = handler("warehouse");
    let event = id("evt_9f3k");
    let sql = h.pick_sql(&event);
    let failed = h
        .inbox
        .process(&h.pool, &warehouse, &event, async |tx| {
            DB::exec(tx, sql.clone()).await?;
            Err::<(), _>(anyhow::anyhow!("the printer is on fire"))
        })
        .await;
    assert!(
        matches!(&failed, Err(ProcessError::Handler(err)) if err.to_string() == "the printer is on fire"),
        "{failed:?}"
    );
    assert_eq!(h.picks_for(&event).await, 0);
    assert_eq!(h.inbox_rows().await, 0);
    assert!(
        deliver(&h, &warehouse, &event).await,
        "the redelivery runs the work"
    );
    assert_eq!(h.picks_for(&event).await, 1);
}

pub async fn sixteen_connections_race_one_wins<DB: Fixture>(name: &str) {
    let h = Arc::new(Harness::<DB>::new(name).await);
    let warehouse = handler("warehouse");
    let event = id("evt_race");
    let start = Arc::new(Barrier::new(16));
    let racers: Vec<_> = (0..16)
        .map(|_| {
            let (h, warehouse, event, start) =
                (h.clone(), warehouse.clone(), event.clone(), start.clone());
            tokio::spawn(async move {
                // Each racer holds its own connection before the start signal.
                let mut conn = h.pool.acquire().await.unwrap();
                start.wait().await;
                let mut tx = conn.begin().await.unwrap();
                let claim = h.inbox.claim(&mut tx, &warehouse, &event).await.unwrap();
                if claim.is_fresh() {
                    DB::exec(&mut tx, h.pick_sql(&event)).await.unwrap();
                    tx.commit().await.unwrap();
                } else {
                    tx.rollback().await.unwrap();
                }
                claim
            })
        })
        .collect();
    let mut fresh = 0;
    for racer in racers {
        fresh += usize::from(racer.await.unwrap().is_fresh());
    }
    assert_eq!(fresh, 1, "exactly one of sixteen racers won");
    assert_eq!(h.picks_for(&event).await, 1, "and the work ran once");
}

/// Environment of the SIGKILL child: where the database is, and which test's tables to use.
const CHILD_URL: &str = "GUESTLIST_SIGKILL_CHILD_URL";
const CHILD_NAME: &str = "GUESTLIST_SIGKILL_CHILD_NAME";
/// What the child prints once the work is done and the commit has not happened.
const WORK_DONE: &str = "WORK DONE, NOT COMMITTED";

pub async fn sigkill_after_work_before_commit_redelivery_runs_once<DB: Fixture>(name: &str) {
    let h = Harness::<DB>::new(name).await;
    let event = id("evt_9f3k");

    let mut child = Command::new(std::env::current_exe().unwrap())
        .args(["sigkill_child", "--exact", "--ignored", "--nocapture"])
        .env(CHILD_URL, &h.url)
        .env(CHILD_NAME, name)
        .stdout(Stdio::piped())
        .spawn()
        .expect("start the child consumer");
    let stdout = child.stdout.take().unwrap();
    let reached = tokio::task::spawn_blocking(move || {
        BufReader::new(stdout)
            .lines()
            .map_while(Result::ok)
            .any(|line| line.contains(WORK_DONE))
    });
    let reached = tokio::time::timeout(Duration::from_secs(120), reached)
        .await
        .expect("the child reached its work within two minutes")
        .unwrap();
    assert!(reached, "the child consumer did its work");
    child.kill().expect("SIGKILL the child"); // std's kill is SIGKILL on Unix
    let status = child.wait().unwrap();
    assert!(!status.success(), "the child died mid-handler: {status}");

    assert_eq!(
        h.picks_for(&event).await,
        0,
        "the killed work never committed"
    );
    assert!(
        deliver(&h, &handler("warehouse"), &event).await,
        "the redelivery found no claim and ran the work"
    );
    assert!(!deliver(&h, &handler("warehouse"), &event).await);
    assert_eq!(h.picks_for(&event).await, 1, "the work ran exactly once");
}

pub async fn sigkill_child<DB: Fixture>() {
    let (Ok(url), Ok(name)) = (std::env::var(CHILD_URL), std::env::var(CHILD_NAME)) else {
        eprintln!("sigkill_child runs only as the SIGKILL test's child process");
        return;
    };
    let h = Harness::<DB>::attach(&url, &short_tag(&name), 1).await;
    let event = id("evt_9f3k");
    let mut tx = h.begin().await;
    let claim = h.inbox.claim(&mut tx, &handler("warehouse"), &event).await;
    assert_eq!(claim.unwrap(), Claim::Fresh);
    DB::exec(&mut tx, h.pick_sql(&event)).await.unwrap();
    println!("{WORK_DONE}");
    tokio::time::sleep(Duration::from_secs(600)).await;
    unreachable!("the parent kills this process before it commits");
}

pub async fn batch_counts_repeats_once_and_skips_seen_ids<DB: Fixture>(name: &str) {
    let h = Harness::<DB>::new(name).await;
    let warehouse = handler("warehouse");
    let mut tx = h.begin().await;
    assert_eq!(
        h.inbox
            .claim(&mut tx, &warehouse, &id("evt_a"))
            .await
            .unwrap(),
        Claim::Fresh
    );
    tx.commit().await.unwrap();

    let batch = ["evt_c", "evt_a", "evt_b", "evt_c", "evt_b", "evt_a"].map(id);
    let mut tx = h.begin().await;
    let fresh = h
        .inbox
        .claim_batch(&mut tx, &warehouse, &batch)
        .await
        .unwrap();
    tx.commit().await.unwrap();
    assert_eq!(fresh, [id("evt_b"), id("evt_c")], "seen once, fresh once");

    let processed = h
        .inbox
        .process_batch(&h.pool, &warehouse, &batch, async |_, _| {
            Ok::<_, sqlx::Error>("ran")
        })
        .await
        .unwrap();
    assert!(processed.fresh.is_empty());
    assert_eq!(processed.duplicates.len(), 3);
    assert_eq!(processed.output, None, "no fresh id, no work");
    assert_eq!(h.inbox_rows().await, 3);

    let mut tx = h.begin().await;
    assert!(
        h.inbox
            .claim_batch(&mut tx, &warehouse, &[])
            .await
            .unwrap()
            .is_empty()
    );
}

pub async fn overlapping_batches_in_opposite_orders_never_deadlock<DB: Fixture>(name: &str) {
    recorder();
    let h = Arc::new(Harness::<DB>::new(name).await);
    let warehouse = handler(&format!("overlap_{}", DB::LABEL));
    const ROUNDS: usize = 30;
    for round in 0..ROUNDS {
        let ids: Vec<MessageId> = (0..100)
            .map(|i| id(&format!("r{round:02}-{i:03}")))
            .collect();
        let forward = ids[..70].to_vec();
        let mut backward = ids[30..].to_vec();
        backward.reverse();
        let start = Arc::new(Barrier::new(2));
        let consumers = [forward, backward].map(|batch| {
            let (h, warehouse, start) = (h.clone(), warehouse.clone(), start.clone());
            tokio::spawn(async move {
                let picks = h.picks();
                start.wait().await;
                h.inbox
                    .process_batch(&h.pool, &warehouse, &batch, async move |tx, fresh| {
                        let values: Vec<String> =
                            fresh.iter().map(|id| format!("(1, '{id}')")).collect();
                        let sql = format!(
                            "INSERT INTO {picks} (order_id, event) VALUES {}",
                            values.join(", ")
                        );
                        DB::exec(tx, sql).await
                    })
                    .await
            })
        });
        let mut fresh = 0;
        for consumer in consumers {
            let done = consumer
                .await
                .unwrap()
                .unwrap_or_else(|err| panic!("round {round}: an error reached the caller: {err}"));
            fresh += done.fresh.len();
        }
        assert_eq!(fresh, 100, "round {round}: every id fresh exactly once");
    }
    let picks = h.picks();
    assert_eq!(h.all_picks().await, (ROUNDS * 100) as i64);
    assert_eq!(
        h.scalar(format!("SELECT count(DISTINCT event) FROM {picks}"))
            .await,
        (ROUNDS * 100) as i64,
        "no id was worked twice"
    );
    let retries = sum(
        &counters(),
        "guestlist_inbox_retries_total",
        &[("handler", warehouse.as_str())],
    );
    assert_eq!(
        retries, 0,
        "sorted claims never deadlocked, so nothing was retried"
    );
}

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
    let h = Harness::<DB>::new(name).await;
    let table = h.inbox.table().to_string();
    h.exec(DB::bulk_old_rows(&table, 10, (8 * DAY).as_secs() as i64))
        .await;
    deliver(&h, &handler("warehouse"), &id("young")).await;

    let purger = Purger::new(h.pool.clone(), &h.inbox, week())
        .every(Duration::from_millis(50))
        .spawn();
    let gone = tokio::time::timeout(Duration::from_secs(60), async {
        while h.inbox_rows().await > 1 {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    })
    .await;
    purger.shutdown().await;
    assert!(gone.is_ok(), "the purger deleted the old rows");
    assert_eq!(h.inbox_rows().await, 1, "the young row stays");
}

pub async fn bad_ids_and_table_names_get_errors_that_say_what_to_do<DB: Fixture>(name: &str) {
    let h = Harness::<DB>::new(name).await;
    let errors = [
        (MessageId::new("").unwrap_err(), "message id is empty"),
        (
            MessageId::new("x".repeat(256)).unwrap_err(),
            "message id is 256 bytes; the limit is 255",
        ),
        (
            MessageId::new("évt_9f3k").unwrap_err(),
            "message id has byte 0xc3 at position 0",
        ),
        (
            HandlerName::new("ware\thouse").unwrap_err(),
            "handler name has byte 0x09 at position 4",
        ),
    ];
    for (err, says) in errors {
        assert!(err.to_string().contains(says), "{err} should say {says:?}");
    }
    let err = Inbox::<DB>::with_table("gl_inbox'; DROP TABLE orders; --").unwrap_err();
    assert!(
        err.to_string().contains("is not a plain identifier"),
        "{err}"
    );
    assert_eq!(h.inbox_rows().await, 0, "nothing was written");
    assert_eq!(
        h.scalar(format!("SELECT count(*) FROM {}", h.orders()))
            .await,
        1,
        "and nothing was dropped"
    );
}

pub async fn ids_compare_byte_for_byte<DB: Fixture>(name: &str) {
    let h = Harness::<DB>::new(name).await;
    let warehouse = handler("warehouse");
    for event in ["evt_a", "evt_A", "evt_a ", " evt_a"] {
        assert!(
            deliver(&h, &warehouse, &id(event)).await,
            "{event:?} is its own message, not a duplicate of a case or padding variant"
        );
    }
    assert_eq!(h.all_picks().await, 4);
}

pub async fn a_narrow_column_errors_instead_of_truncating<DB: Fixture>(name: &str) {
    // A user's own migration made the id column too narrow; claims must fail loudly rather
    // than truncate, where "evt_0123456789" and "evt_0123abcdef" would become one message.
    let h = Harness::<DB>::new(name).await;
    let table = h.inbox.table().to_string();
    if let Some(narrow) = DB::narrow_message_id(&table) {
        h.exec(narrow).await;
    }
    let warehouse = handler("warehouse");
    for event in ["evt_0123456789", "evt_0123abcdef"] {
        let mut tx = h.begin().await;
        match h.inbox.claim(&mut tx, &warehouse, &id(event)).await {
            Err(Error::Database(err)) => {
                let code = err.as_database_error().and_then(|e| e.code());
                assert_eq!(
                    code.as_deref(),
                    Some("22001"),
                    "{event}: a value-too-long error, got {err}"
                );
            }
            Ok(Claim::Fresh) => {
                tx.commit().await.unwrap();
                let stored = h
                    .scalar(format!(
                        "SELECT count(*) FROM {table} WHERE message_id = '{event}'"
                    ))
                    .await;
                assert_eq!(stored, 1, "{event} was stored whole, not truncated");
            }
            other => panic!("{event}: expected an error or an untruncated claim, got {other:?}"),
        }
    }
}

pub async fn a_missing_table_says_to_migrate<DB: Fixture>(name: &str) {
    let h = Harness::<DB>::new(name).await;
    let missing = Inbox::<DB>::with_table("gl_never_migrated").unwrap();
    let mut tx = h.begin().await;
    let err = missing
        .claim(&mut tx, &handler("warehouse"), &id("evt_9f3k"))
        .await
        .unwrap_err();
    assert!(matches!(err, Error::MissingTable { .. }), "{err:?}");
    assert!(err.to_string().contains("guestlist migrate"), "{err}");
    drop(tx);
    let err = missing
        .check(&h.pool, &handler("warehouse"))
        .await
        .unwrap_err();
    assert!(matches!(err, Error::MissingTable { .. }), "{err:?}");
    h.inbox.check(&h.pool, &handler("warehouse")).await.unwrap();
}

pub async fn concurrent_migrations_all_succeed<DB: Fixture>(name: &str) {
    let h = Arc::new(Harness::<DB>::new(name).await);
    let inbox = Inbox::<DB>::with_table(&format!("{}_m", h.inbox.table())).unwrap();
    h.exec(format!("DROP TABLE IF EXISTS {}", inbox.table()))
        .await;
    let migrations: Vec<_> = (0..4)
        .map(|_| {
            let (h, inbox) = (h.clone(), inbox.clone());
            tokio::spawn(async move { inbox.migrate(&h.pool).await })
        })
        .collect();
    for migration in migrations {
        migration.await.unwrap().expect("every migration succeeds");
    }
    inbox.migrate(&h.pool).await.expect("and once more");
    let mut tx = h.begin().await;
    assert!(
        inbox
            .claim(&mut tx, &handler("warehouse"), &id("evt_9f3k"))
            .await
            .unwrap()
            .is_fresh()
    );
}

pub async fn an_applications_schema_steps_take_turns<DB: Fixture>(name: &str) {
    let h = Arc::new(Harness::<DB>::new(name).await);
    let (orders, picks) = (format!("{}_s", h.orders()), format!("{}_s", h.picks()));
    for table in [&orders, &picks] {
        h.exec(format!("DROP TABLE IF EXISTS {table}")).await;
    }
    let schema = Schema::new([
        format!(
            "CREATE TABLE IF NOT EXISTS {orders} (id BIGINT PRIMARY KEY, status VARCHAR(16) NOT NULL)"
        ),
        format!(
            "CREATE TABLE IF NOT EXISTS {picks} (order_id BIGINT NOT NULL, event VARCHAR(255) NOT NULL)"
        ),
    ]);
    let start = Arc::new(Barrier::new(4));
    let steps: Vec<_> = (0..4)
        .map(|_| {
            let (h, schema, start) = (h.clone(), schema.clone(), start.clone());
            tokio::spawn(async move {
                let mut conn = h.pool.acquire().await.unwrap();
                start.wait().await;
                schema.migrate_on::<DB>(&mut conn).await
            })
        })
        .collect();
    for step in steps {
        step.await
            .unwrap()
            .expect("every instance's schema step succeeds");
    }
    schema
        .migrate(&h.pool)
        .await
        .expect("and once more, at the next start");
    h.exec(format!(
        "INSERT INTO {picks} (order_id, event) VALUES (42, 'evt_9f3k')"
    ))
    .await;
    assert_eq!(h.scalar(format!("SELECT count(*) FROM {picks}")).await, 1);
    for table in [&orders, &picks] {
        h.exec(format!("DROP TABLE {table}")).await;
    }
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

pub async fn a_holder_that_rolls_back_lets_exactly_one_waiter_run<DB: Fixture>(name: &str) {
    let h = Arc::new(Harness::<DB>::new(name).await);
    let warehouse = handler("warehouse");
    let event = id("evt_9f3k");
    let mut holder = h.inbox.begin(&h.pool).await.unwrap();
    assert!(
        h.inbox
            .claim(&mut holder, &warehouse, &event)
            .await
            .unwrap()
            .is_fresh()
    );
    DB::exec(&mut holder, h.pick_sql(&event)).await.unwrap();

    let waiters: Vec<_> = (0..8)
        .map(|_| {
            let (h, warehouse, event) = (h.clone(), warehouse.clone(), event.clone());
            tokio::spawn(async move {
                h.inbox
                    .process(&h.pool, &warehouse, &event.clone(), {
                        let sql = h.pick_sql(&event);
                        async move |tx| DB::exec(tx, sql.clone()).await
                    })
                    .await
            })
        })
        .collect();
    tokio::time::sleep(Duration::from_millis(300)).await; // let the waiters queue on the row
    holder.rollback().await.unwrap();

    let mut ran = 0;
    for waiter in waiters {
        let done = waiter
            .await
            .unwrap()
            .expect("no error reaches a waiter; deadlocks are retried");
        ran += usize::from(done.ran());
    }
    assert_eq!(
        ran, 1,
        "after the rollback, exactly one waiter did the work"
    );
    assert_eq!(h.picks_for(&event).await, 1);
}

pub async fn a_claim_outside_a_transaction_is_refused<DB: Fixture>(name: &str) {
    let h = Harness::<DB>::new(name).await;
    let mut conn = h.pool.acquire().await.unwrap();
    let err = h
        .inbox
        .claim(&mut conn, &handler("warehouse"), &id("evt_9f3k"))
        .await
        .unwrap_err();
    assert!(matches!(err, Error::NotInTransaction), "{err:?}");
    assert!(err.to_string().contains("needs a transaction"), "{err}");
    assert_eq!(h.inbox_rows().await, 0, "the refused claim wrote nothing");
}

/// A `thiserror` enum of the kind applications write, wrapping sqlx's error.
#[derive(Debug, thiserror::Error)]
enum PickError {
    #[error("the pick failed: {0}")]
    Database(#[from] sqlx::Error),
}

/// Orders 1 and 2, paid, for two transactions to update in opposite orders; `None` where the
/// backend cannot deadlock.
async fn two_paid_orders<DB: Fixture>(name: &str) -> Option<Arc<Harness<DB>>> {
    if !DB::ROW_LOCKS {
        return None;
    }
    recorder();
    let h = Arc::new(Harness::<DB>::new(name).await);
    h.exec(format!(
        "INSERT INTO {} (id, status) VALUES (1, 'PAID'), (2, 'PAID')",
        h.orders()
    ))
    .await;
    Some(h)
}

pub async fn a_deadlock_in_the_work_is_retried<DB: Fixture>(name: &str) {
    let Some(h) = two_paid_orders::<DB>(name).await else {
        return; // SQLite's BEGIN IMMEDIATE serializes whole transactions: no deadlock to provoke
    };
    // The deadlock reaches the inbox as sqlx's error, inside anyhow with a context, and inside an
    // enum of the application's own: each one must be found in the chain and retried.
    deadlock_story(&h, "sqlx", |err| err).await;
    deadlock_story(&h, "anyhow", |err| {
        anyhow::Error::new(err).context("updating the order")
    })
    .await;
    deadlock_story(&h, "thiserror", PickError::from).await;
    // As WorkError's doc recommends for a boxed error: anyhow's from_boxed, whose chain shows
    // the driver's own error and skips the sqlx::Error around it.
    deadlock_story(&h, "from_boxed", |err| {
        let boxed: Box<dyn std::error::Error + Send + Sync> = Box::new(err);
        anyhow::Error::from_boxed(boxed)
    })
    .await;
}

/// Two handlers update orders 1 and 2 in opposite orders, meeting in the middle on their first
/// attempt: the database must break the deadlock, and process() must run the loser again, with
/// the work's errors wrapped by `wrap`.
async fn deadlock_story<DB: Fixture, E: guestlist::WorkError>(
    h: &Arc<Harness<DB>>,
    style: &str,
    wrap: fn(sqlx::Error) -> E,
) {
    let deadlocked = handler(&format!("deadlocked_{style}_{}", DB::LABEL));
    let middle = Arc::new(Barrier::new(2));
    let handlers = [(1, 2, "evt_a"), (2, 1, "evt_b")].map(|(first, second, event)| {
        let (h, middle, orders, deadlocked) =
            (h.clone(), middle.clone(), h.orders(), deadlocked.clone());
        let first_try = Arc::new(AtomicBool::new(true));
        tokio::spawn(async move {
            h.inbox
                .process(&h.pool, &deadlocked, &id(event), async move |tx| {
                    let update =
                        |id| format!("UPDATE {orders} SET status = 'PICKING' WHERE id = {id}");
                    DB::exec(tx, update(first)).await.map_err(wrap)?;
                    if first_try.swap(false, Ordering::SeqCst) {
                        let _ = tokio::time::timeout(Duration::from_secs(5), middle.wait()).await;
                    }
                    DB::exec(tx, update(second)).await.map_err(wrap)
                })
                .await
        })
    });
    for handler in handlers {
        let done = handler
            .await
            .unwrap()
            .unwrap_or_else(|err| panic!("{style}: the deadlock reached the caller: {err:?}"));
        assert!(done.ran());
    }
    let retries = sum(
        &counters(),
        "guestlist_inbox_retries_total",
        &[("handler", deadlocked.as_str())],
    );
    assert!(
        retries >= 1,
        "{style}: the deadlock happened and was retried"
    );
}

pub async fn a_bare_claim_in_a_transaction_is_retried_after_a_deadlock<DB: Fixture>(name: &str) {
    let Some(h) = two_paid_orders::<DB>(name).await else {
        return; // SQLite's BEGIN IMMEDIATE serializes whole transactions: no deadlock to provoke
    };
    let warehouse = handler("warehouse");
    let middle = Arc::new(Barrier::new(2));
    // Inbox::transaction around a bare claim: the whole transaction runs again, claim included.
    let handlers = [(1, 2, "evt_a"), (2, 1, "evt_b")].map(|(first, second, event)| {
        let (h, middle, orders, warehouse) =
            (h.clone(), middle.clone(), h.orders(), warehouse.clone());
        let first_try = Arc::new(AtomicBool::new(true));
        // Owned, not borrowed: a spawned async closure must not capture references (see
        // Inbox::process on Send).
        let event = id(event);
        tokio::spawn(async move {
            let inbox = h.inbox.clone();
            h.inbox
                .transaction(&h.pool, async move |tx| {
                    if inbox.claim(tx, &warehouse, &event).await? == Claim::Duplicate {
                        return Ok(false);
                    }
                    let update =
                        |id| format!("UPDATE {orders} SET status = 'PICKING' WHERE id = {id}");
                    DB::exec(tx, update(first)).await?;
                    if first_try.swap(false, Ordering::SeqCst) {
                        let _ = tokio::time::timeout(Duration::from_secs(5), middle.wait()).await;
                    }
                    DB::exec(tx, update(second)).await?;
                    Ok::<_, anyhow::Error>(true)
                })
                .await
        })
    });
    for handler in handlers {
        let fresh = handler
            .await
            .unwrap()
            .unwrap_or_else(|err| panic!("the deadlock reached the caller: {err:?}"));
        assert!(fresh, "each event is claimed fresh once");
    }
    assert_eq!(h.inbox_rows().await, 2, "both claims committed, once each");
    let retries = sum(
        &counters(),
        "guestlist_inbox_retries_total",
        &[("handler", "transaction")],
    );
    assert!(retries >= 1, "the deadlock happened and was retried");
}

/// The application's own SQL, written once for every database with the bound guestlist exports.
async fn record_pick<DB: guestlist::Backend>(
    tx: &mut DB::Connection,
    table: &str,
    event: String,
) -> Result<u64, sqlx::Error>
where
    for<'q> i64: sqlx::Encode<'q, DB> + sqlx::Type<DB>,
    for<'q> String: sqlx::Encode<'q, DB> + sqlx::Type<DB>,
{
    // PostgreSQL numbers its placeholders; SQLite and MySQL take `?`.
    let values = if DB::NAME == "PostgreSQL" {
        "($1, $2)"
    } else {
        "(?, ?)"
    };
    let sql = format!("INSERT INTO {table} (order_id, event) VALUES {values}");
    let done = sqlx::query::<DB>(sqlx::AssertSqlSafe(sql))
        .bind(super::harness::ORDER)
        .bind(event)
        .execute(DB::executor(tx))
        .await?;
    Ok(DB::rows_affected(&done))
}

pub async fn generic_work_runs_on_every_database<DB: Fixture>(name: &str)
where
    for<'q> i64: sqlx::Encode<'q, DB> + sqlx::Type<DB>,
    for<'q> String: sqlx::Encode<'q, DB> + sqlx::Type<DB>,
{
    let h = Harness::<DB>::new(name).await;
    let (warehouse, event, picks) = (handler("warehouse"), id("evt_9f3k"), h.picks());
    let mut ran = 0;
    for _delivery in 0..3 {
        let done = h
            .inbox
            .process(&h.pool, &warehouse, &event, async |tx| {
                record_pick::<DB>(tx, &picks, event.to_string()).await
            })
            .await
            .expect("process");
        ran += u32::from(done.ran());
    }
    assert_eq!(ran, 1);
    assert_eq!(
        h.picks_for(&event).await,
        1,
        "three deliveries, one pick task"
    );
}

pub async fn sixteen_writers_on_deferred_transactions_are_told_what_to_call<DB: Fixture>(
    name: &str,
) {
    let h = Arc::new(Harness::<DB>::new(name).await);
    let warehouse = handler("warehouse");
    // Each writer reads first, as a handler that checks the order would, then claims: on SQLite
    // a deferred transaction then asks for the write lock late.
    let run = |deferred: bool| {
        let start = Arc::new(Barrier::new(16));
        (0..16)
            .map(|n| {
                let (h, warehouse, start) = (h.clone(), warehouse.clone(), start.clone());
                tokio::spawn(async move {
                    let event = id(&format!("evt_{}_{n}", if deferred { "d" } else { "i" }));
                    start.wait().await;
                    let mut tx = if deferred {
                        h.pool.begin().await?
                    } else {
                        h.inbox.begin(&h.pool).await?
                    };
                    let read = format!("SELECT count(*) FROM {}", h.orders());
                    sqlx::query(sqlx::AssertSqlSafe(read))
                        .execute(DB::executor(&mut tx))
                        .await?;
                    tokio::time::sleep(Duration::from_millis(20)).await;
                    let claim = h.inbox.claim(&mut tx, &warehouse, &event).await?;
                    assert!(claim.is_fresh(), "each writer has an event of its own");
                    DB::exec(&mut tx, h.pick_sql(&event)).await?;
                    tx.commit().await?;
                    Ok::<_, Error>(())
                })
            })
            .collect::<Vec<_>>()
    };
    let mut refused: i64 = 0;
    for writer in run(true) {
        if let Err(err) = writer.await.unwrap() {
            assert!(
                matches!(err, Error::DeferredTransaction(_)) && err.is_retryable(),
                "{err:?}"
            );
            assert!(err.to_string().contains("Inbox::begin(&pool)"), "{err}");
            refused += 1;
        }
    }
    if DB::LABEL == "SQLite" {
        assert!(
            refused > 0,
            "sixteen deferred writers met on SQLite's one write lock"
        );
    } else {
        assert_eq!(refused, 0, "only SQLite takes its write lock late");
    }
    for writer in run(false) {
        writer
            .await
            .unwrap()
            .expect("inbox.begin takes the write lock up front");
    }
    assert_eq!(
        h.inbox_rows().await,
        32 - refused,
        "every writer that was not refused committed once; the refused ones wrote nothing"
    );
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

pub async fn old_idempotency_keys_are_purged_and_young_ones_stay<DB: Fixture>(name: &str) {
    let h = Harness::<DB>::new(name).await;
    let keys = SqlKeyStore::with_table(h.pool.clone(), &format!("keys_{}", h.tag)).unwrap();
    h.exec(format!("DROP TABLE IF EXISTS {}", keys.table()))
        .await;
    keys.migrate().await.unwrap();
    let scope = Scope::from_credentials(b"Bearer alice");
    let fingerprint = Fingerprint::builder("POST", "/payments").body(b"{}");
    let response = StoredResponse {
        status: 201,
        headers: vec![],
        body: StoredBody::Bytes(b"{}".to_vec()),
    };
    for key in ["old", "young"] {
        let key = IdempotencyKey::new(key).unwrap();
        let Begin::Run { attempt } = keys.begin(&scope, &key, &fingerprint, HOUR).await.unwrap()
        else {
            panic!("a new key runs");
        };
        keys.complete(&scope, &key, attempt, &response)
            .await
            .unwrap();
    }
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
        keys.begin(&scope, &young, &fingerprint, HOUR)
            .await
            .unwrap(),
        Begin::Replay(_)
    ));
    let old = IdempotencyKey::new("old").unwrap();
    assert!(
        matches!(
            keys.begin(&scope, &old, &fingerprint, HOUR).await.unwrap(),
            Begin::Run { .. }
        ),
        "a purged key is new again"
    );
}

pub async fn the_work_carries_its_message_key_downstream<DB: Fixture>(name: &str) {
    let h = Harness::<DB>::new(name).await;
    let carried = h
        .inbox
        .process(
            &h.pool,
            &handler("warehouse"),
            &id("evt_9f3k"),
            async |_| guestlist_carry::key_for("charge"),
        )
        .await
        .unwrap();
    let Processed::Ran(key) = carried else {
        panic!("a fresh message runs its work");
    };
    assert_eq!(
        key.as_str(),
        "warehouse:evt_9f3k/charge",
        "one stable key per step"
    );
    assert!(
        guestlist_carry::key_for("charge").is_err(),
        "and none outside the work"
    );
}
