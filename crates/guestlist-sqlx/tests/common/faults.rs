//! Faults below the process, through a [`FaultProxy`] between the inbox and the server: the
//! connection dies after a `COMMIT` went out, and whatever the database did (committed, or
//! never saw it), the redelivery ends in one effect per id. Effects are counted, not calls.

use std::time::Duration;

use guestlist_sqlx::sqlx::Pool;
use guestlist_sqlx::{Error, MessageId, ProcessError};
use guestlist_testkit::Fixture;
use guestlist_testkit::fault_proxy::{Ambiguity, FaultProxy};

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

/// The first attempt's error: the store's, and one that says the commit's fate is unknown.
fn assert_unknown_commit<E: std::fmt::Debug>(err: &ProcessError<E>, ambiguity: Ambiguity) {
    let ProcessError::Store(store @ Error::CommitUnknown(_)) = err else {
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
        sprung.wait(Duration::from_secs(10)).await;
        let err = first.expect_err("a commit whose answer never came is no acknowledgment");
        assert_unknown_commit(&err, ambiguity);

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
        sprung.wait(Duration::from_secs(10)).await;
        let err = first.expect_err("a commit whose answer never came is no acknowledgment");
        assert_unknown_commit(&err, ambiguity);

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
