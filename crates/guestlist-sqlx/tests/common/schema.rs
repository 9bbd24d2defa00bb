//! The tables and the values put in them: names and ids refused with what to do, migrations that take turns. Each counts effects, not calls.

use std::sync::Arc;

use guestlist_sqlx::{Claim, Error, HandlerName, Inbox, MessageId, Schema};
use tokio::sync::Barrier;

use super::harness::{Harness, handler, id};
use guestlist_testkit::Fixture;

use super::harness::deliver;

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
