//! Work the database asks to run again (deadlocks, a busy SQLite), and the application's own SQL written once. Each counts effects, not calls.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use guestlist_sqlx::sqlx;
use guestlist_sqlx::{Claim, Error};
use tokio::sync::Barrier;

use super::harness::{Harness, handler, id};
use guestlist_testkit::Fixture;
use guestlist_testkit::metrics::{counters, recorder, sum};

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
async fn deadlock_story<DB: Fixture, E: guestlist_sqlx::WorkError>(
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
async fn record_pick<DB: guestlist_sqlx::Backend>(
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
