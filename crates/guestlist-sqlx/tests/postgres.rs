//! The inbox suite on PostgreSQL, over a real connection.

mod common;

inbox_suite!(guestlist_sqlx::sqlx::Postgres);
outbox_suite!(guestlist_sqlx::sqlx::Postgres);
wire_faults_suite!(guestlist_sqlx::sqlx::Postgres);

/// The database stopped the hard way and started again under four writers (a server of the
/// test's own).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_database_restarted_under_four_writers_loses_and_doubles_nothing() {
    use guestlist_testkit::private_postgres::PrivatePostgres;
    use guestlist_testkit::private_server::PrivateServer;
    let cluster = PrivatePostgres::start();
    common::faults::a_database_restarted_under_four_writers_loses_and_doubles_nothing::<
        guestlist_sqlx::sqlx::Postgres,
    >("pg_restarted", &cluster.url(), async || {
        cluster.restart(std::time::Duration::from_millis(500)).await
    })
    .await;
}

/// The key store's purge skips a row a live request's transaction holds (the inbox's purge, whose
/// rows nothing else locks, deletes without locking first).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_old_key_a_live_request_holds_is_skipped_not_waited_for() {
    common::retention::an_old_key_a_live_request_holds_is_skipped_not_waited_for("pg_held_key")
        .await;
}

/// The table `migrate` makes is laid out for a life of inserts and one kind of delete: ids
/// compared byte for byte whatever the server's locale, the `seen_at` index's pages filled
/// whole (the time only grows), and a vacuum after each day's purge instead of every fifth.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_inbox_table_is_laid_out_for_inserts_then_purges() {
    let h = common::harness::Harness::<guestlist_sqlx::sqlx::Postgres>::new("pg_layout").await;
    let table = h.inbox.table().to_string();
    for (relation, option) in [
        (table.clone(), "autovacuum_vacuum_scale_factor=0.02"),
        (format!("{table}_seen_at_idx"), "fillfactor=100"),
    ] {
        let set = h
            .scalar(format!(
                "SELECT count(*) FROM pg_class \
                 WHERE oid = '{relation}'::regclass AND '{option}' = ANY(reloptions)"
            ))
            .await;
        assert_eq!(set, 1, "{relation} has {option}");
    }
    for key_table in [table.clone(), format!("{table}_deferrals")] {
        let byte_order = h
            .scalar(format!(
                "SELECT count(*) FROM pg_attribute a JOIN pg_collation c ON c.oid = a.attcollation \
                 WHERE a.attrelid = '{key_table}'::regclass \
                 AND a.attname IN ('handler', 'message_id') AND c.collname = 'C'"
            ))
            .await;
        assert_eq!(
            byte_order, 2,
            "{key_table}'s handler and message_id are COLLATE \"C\""
        );
    }
}

/// A run that committed (and forgot its journal) just after another delivery's first look at
/// the inbox and before its run claim: the claim succeeds on a forgotten row, and the second
/// look (with the journal's read) finds the message handled. Forced with a trigger that plays
/// that other run's commit the moment the claim inserts its run row: the delivery is a
/// duplicate, runs no step, and leaves no run row behind.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_run_that_commits_between_the_first_look_and_the_claim_is_seen_by_the_second() {
    use guestlist_sqlx::{MessageId, Stepped};
    let h = common::harness::Harness::<guestlist_sqlx::sqlx::Postgres>::new("pg_steps_race").await;
    let inbox = h.inbox.table().to_string();
    h.exec(format!(
        "CREATE OR REPLACE FUNCTION {inbox}_race() RETURNS trigger AS $$ BEGIN \
         INSERT INTO {inbox} (handler, message_id) VALUES (NEW.handler, NEW.message_id) \
         ON CONFLICT DO NOTHING; RETURN NEW; END $$ LANGUAGE plpgsql"
    ))
    .await;
    h.exec(format!(
        "CREATE TRIGGER {inbox}_race AFTER INSERT ON {inbox}_steps FOR EACH ROW \
         WHEN (NEW.place = 0) EXECUTE FUNCTION {inbox}_race()"
    ))
    .await;
    let (warehouse, event) = (
        common::harness::handler("warehouse"),
        MessageId::new("evt_raced").unwrap(),
    );
    let calls = std::sync::atomic::AtomicU32::new(0);
    let done = h
        .inbox
        .process_steps(
            &h.pool,
            &warehouse,
            &event,
            async |steps| {
                let _: String = steps
                    .external("charge", || async {
                        calls.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
                        anyhow::Ok("ch_1".to_owned())
                    })
                    .await?;
                anyhow::Ok(())
            },
            async |_tx, ()| anyhow::Ok(()),
        )
        .await;
    let run_rows = h
        .scalar(format!(
            "SELECT count(*) FROM {inbox}_steps WHERE message_id = 'evt_raced'"
        ))
        .await;
    h.exec(format!("DROP TRIGGER {inbox}_race ON {inbox}_steps"))
        .await;
    h.exec(format!("DROP FUNCTION {inbox}_race()")).await;
    assert_eq!(done.unwrap(), Stepped::Duplicate);
    assert_eq!(calls.into_inner(), 0, "no step ran");
    assert_eq!(run_rows, 0, "the run row it claimed is forgotten");
}
