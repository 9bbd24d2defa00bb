//! Faults below the process, through a [`FaultProxy`] between the inbox and the server: the
//! connection dies after a `COMMIT` went out, and whatever the database did (committed, or
//! never saw it), the redelivery ends in one effect per id. Effects are counted, not calls.

use std::time::Duration;

use guestlist_sqlx::sqlx::Pool;
use guestlist_sqlx::{Error, MessageId, ProcessError};
use guestlist_testkit::Fixture;
use guestlist_testkit::fault_proxy::{Ambiguity, FaultProxy, Sprung};

use super::harness::{Harness, handler, id};

/// The harness of `name` for `ambiguity`, with a pool through a proxy to its server.
async fn through_proxy<DB: Fixture>(
    name: &str,
    ambiguity: Ambiguity,
) -> (Harness<DB>, FaultProxy, Pool<DB>) {
    let h = Harness::<DB>::new(&format!("{name}_{ambiguity:?}")).await;
    let (proxy, url) = FaultProxy::for_url(&h.url).await;
    let pool = DB::connect(&url, 2)
        .await
        .expect("a pool through the proxy");
    (h, proxy, pool)
}

/// Once the trap `sprung`, the first attempt's outcome: the store's error, one that says the
/// commit's fate is unknown and what to do.
async fn assert_unknown_commit<T: std::fmt::Debug, E: std::fmt::Debug>(
    sprung: Sprung,
    first: Result<T, ProcessError<E>>,
    ambiguity: Ambiguity,
) {
    sprung.wait(Duration::from_secs(10)).await;
    let err = first.expect_err("a commit whose answer never came is no acknowledgment");
    let ProcessError::Store(store @ Error::CommitUnknown(_)) = &err else {
        panic!("{ambiguity:?}: the commit's fate is unknown, not {err:?}");
    };
    let text = store.to_string();
    assert!(
        text.contains("do not acknowledge"),
        "the error says what to do: {text}"
    );
}

/// `process`: the commit's answer never comes back. The first attempt is an error (never
/// "done"), and the redelivery is a duplicate where the commit landed, fresh work where it was
/// lost: one pick task either way, and one inbox row.
pub async fn an_ambiguous_commit_of_process_ends_in_one_effect<DB: Fixture>(name: &str) {
    let frame = DB::COMMIT_FRAME.expect("a database with a wire");
    for ambiguity in [Ambiguity::Landed, Ambiguity::Lost] {
        let (h, proxy, pool) = through_proxy::<DB>(name, ambiguity).await;
        let warehouse = handler("warehouse");
        let event = id("evt_9f3k");
        let sprung = proxy.trap(frame, ambiguity);
        let first = h
            .inbox
            .process(&pool, &warehouse, &event, h.pick(&event))
            .await;
        assert_unknown_commit(sprung, first, ambiguity).await;

        let redelivered = h
            .inbox
            .process(&pool, &warehouse, &event, h.pick(&event))
            .await
            .expect("the redelivery, with the link whole");
        assert_eq!(
            redelivered.ran(),
            ambiguity == Ambiguity::Lost,
            "{ambiguity:?}: the redelivery finds out what the database did"
        );
        assert_eq!(h.picks_for(&event).await, 1, "{ambiguity:?}: one pick task");
        assert_eq!(h.inbox_rows().await, 1, "{ambiguity:?}: one inbox row");
    }
}

/// `process_batch`: the same for a batch of five ids, one of them handled before; the
/// redelivered batch claims the four where the commit was lost, none where it landed.
pub async fn an_ambiguous_commit_of_a_batch_ends_in_one_effect_per_id<DB: Fixture>(name: &str) {
    let frame = DB::COMMIT_FRAME.expect("a database with a wire");
    for ambiguity in [Ambiguity::Landed, Ambiguity::Lost] {
        let (h, proxy, pool) = through_proxy::<DB>(name, ambiguity).await;
        let warehouse = handler("warehouse");
        let batch: Vec<MessageId> = (0..5).map(|n| id(&format!("evt_{n}"))).collect();
        assert!(
            h.inbox
                .process(&pool, &warehouse, &batch[0], h.pick(&batch[0]))
                .await
                .unwrap()
                .ran()
        );
        let work = |h: &Harness<DB>| {
            let sqls: Vec<(MessageId, String)> = batch
                .iter()
                .map(|id| (id.clone(), h.pick_sql(id)))
                .collect();
            async move |tx: &mut DB::Connection, fresh: &[MessageId]| {
                for (id, sql) in &sqls {
                    if fresh.contains(id) {
                        DB::exec(tx, sql.clone()).await?;
                    }
                }
                Ok::<_, guestlist_sqlx::sqlx::Error>(fresh.len())
            }
        };
        let sprung = proxy.trap(frame, ambiguity);
        let first = h
            .inbox
            .process_batch(&pool, &warehouse, &batch, work(&h))
            .await;
        assert_unknown_commit(sprung, first, ambiguity).await;

        let redelivered = h
            .inbox
            .process_batch(&pool, &warehouse, &batch, work(&h))
            .await
            .expect("the redelivery, with the link whole");
        let expected_fresh = if ambiguity == Ambiguity::Lost { 4 } else { 0 };
        assert_eq!(
            (redelivered.fresh.len(), redelivered.duplicates.len()),
            (expected_fresh, 5 - expected_fresh),
            "{ambiguity:?}: the redelivery finds out what the database did"
        );
        for event in &batch {
            assert_eq!(
                h.picks_for(event).await,
                1,
                "{ambiguity:?}: one pick task for {event}"
            );
        }
        assert_eq!(h.inbox_rows().await, 5, "{ambiguity:?}: one row per id");
    }
}

/// Four writers handle the same 200 ids, each in its own order, while the database at `url` (a
/// server of the test's own) is stopped the hard way by `restart` (`pg_ctl stop -m
/// immediate`, a SIGKILL of `mariadbd`) and started again: a writer that meets an error
/// handles the id again, as a redelivery would, on the same pool. Every writer finishes by
/// itself, and each id has one pick task and one inbox row.
pub async fn a_database_restarted_under_four_writers_loses_and_doubles_nothing<DB: Fixture>(
    name: &str,
    url: &str,
    restart: impl AsyncFnOnce(),
) {
    use std::sync::Arc;
    use std::sync::atomic::{AtomicU64, Ordering};

    const IDS: usize = 200;
    let h = Arc::new(Harness::<DB>::new_at(url, name).await);
    let done = Arc::new(AtomicU64::new(0));
    let errors = Arc::new(AtomicU64::new(0));
    let writers: Vec<_> = (0..4)
        .map(|writer| {
            let (h, done, errors) = (h.clone(), done.clone(), errors.clone());
            tokio::spawn(async move {
                let warehouse = handler("warehouse");
                let mut fresh = 0u64;
                for n in 0..IDS {
                    // Each writer in its own order: a quarter of the way apart.
                    let event = id(&format!("evt_{}", (n + writer * IDS / 4) % IDS));
                    loop {
                        match h
                            .inbox
                            .process(&h.pool, &warehouse, &event, {
                                let sql = h.pick_sql(&event);
                                async move |tx| DB::exec(tx, sql.clone()).await
                            })
                            .await
                        {
                            Ok(processed) => {
                                fresh += u64::from(processed.ran());
                                break;
                            }
                            Err(_) => {
                                errors.fetch_add(1, Ordering::SeqCst);
                                tokio::time::sleep(Duration::from_millis(50)).await;
                            }
                        }
                    }
                    done.fetch_add(1, Ordering::SeqCst);
                }
                fresh
            })
        })
        .collect();

    while done.load(Ordering::SeqCst) < (IDS as u64) {
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    restart().await;

    let mut fresh = 0;
    for writer in writers {
        fresh += tokio::time::timeout(Duration::from_secs(120), writer)
            .await
            .expect("every writer finishes by itself")
            .unwrap();
    }
    assert!(
        errors.load(Ordering::SeqCst) > 0,
        "the writers met the restart"
    );
    assert!(fresh <= IDS as u64, "{fresh} fresh claims of {IDS} ids");
    assert_eq!(h.all_picks().await, IDS as i64, "one pick task per id");
    assert_eq!(
        h.scalar(format!("SELECT count(DISTINCT event) FROM {}", h.picks()))
            .await,
        IDS as i64,
        "none doubled"
    );
    assert_eq!(h.inbox_rows().await, IDS as i64, "one inbox row per id");
}
