//! The inbox's claims: one effect per id however it is delivered, raced, rolled back or killed. Each counts effects, not calls.

use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};
use std::sync::Arc;
use std::time::Duration;

use guestlist_sqlx::sqlx::{self, Connection};
use guestlist_sqlx::{
    Claim, Error, Fingerprint, IdempotencyKey, KeyClaim, KeyStore, MessageId, ProcessError,
    Processed, Scope, SqlKeyStore,
};
use tokio::sync::Barrier;

use super::harness::{Harness, handler, id};
use guestlist_testkit::metrics::{counters, recorder, sum};
use guestlist_testkit::{Fixture, short_tag};

use super::harness::deliver;

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

/// A key claimed on the handler's own transaction needs a lock that ends with it: where the
/// database has one (PostgreSQL) a racing claim is told the key is in flight and a rollback
/// frees the key; where it has none the claim is refused, and the key stays free.
pub async fn a_claim_on_the_handlers_transaction_needs_a_lock_to_guard_it<DB: Fixture>(name: &str) {
    let h = Harness::<DB>::new(name).await;
    let keys = SqlKeyStore::with_table(h.pool.clone(), &format!("keys_{}", h.tag)).unwrap();
    h.exec(format!("DROP TABLE IF EXISTS {}", keys.table()))
        .await;
    keys.migrate().await.unwrap();
    let (scope, key) = (
        Scope::new("all").unwrap(),
        IdempotencyKey::new("k1").unwrap(),
    );
    let fingerprint = Fingerprint::builder("POST", "/charges").body(b"{}");
    let lease = Duration::from_secs(60);
    assert_eq!(
        SqlKeyStore::<DB>::claims_on_transaction(),
        DB::LABEL == "PostgreSQL",
        "{}",
        DB::LABEL
    );
    let mut first = h.pool.begin().await.unwrap();
    let claimed = keys
        .claim_locked(&mut first, &scope, &key, &fingerprint, lease)
        .await;
    if SqlKeyStore::<DB>::claims_on_transaction() {
        assert!(matches!(claimed, Ok(KeyClaim::Run { .. })), "{claimed:?}");
        let mut second = h.pool.begin().await.unwrap();
        let racing = keys
            .claim_locked(&mut second, &scope, &key, &fingerprint, lease)
            .await
            .unwrap();
        assert!(matches!(racing, KeyClaim::InFlight { .. }), "{racing:?}");
        second.rollback().await.unwrap();
    } else {
        let err = claimed.unwrap_err();
        assert!(
            err.to_string().contains("no transaction-scoped lock"),
            "{err}"
        );
    }
    first.rollback().await.unwrap();
    // Rolled back or never written: the committed claim finds the key free.
    let after = keys.claim(&scope, &key, &fingerprint, lease).await.unwrap();
    assert!(matches!(after, KeyClaim::Run { .. }), "{after:?}");
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
