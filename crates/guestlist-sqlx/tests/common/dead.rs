//! Incoming dead letters: recorded with a copy of the message, listed the newest first,
//! grouped by failure, read whole, dropped and purged by their own retention. (Their retry
//! publishes to a broker: the broker suite tells it, on each broker.)

use std::time::{Duration, SystemTime};

use guestlist_sqlx::{DeadCopy, DeadGroup, DeadState, KEPT_BODY_BYTES};
use guestlist_testkit::Fixture;

use super::harness::{Harness, handler, id};

/// A copy with `body`, for `orders.paid`, keyed `order-42`, with one header.
fn copy(body: &[u8]) -> DeadCopy<'_> {
    DeadCopy {
        topic: Some("orders.paid"),
        key: Some("order-42"),
        headers: HEADERS,
        body,
    }
}

static HEADERS: &[(String, String)] = &[];

/// What a consumer records of the messages it dead-letters: each handler's give-up, the newest
/// first, a message dead-lettered again replacing its record; counted.
pub async fn incoming_dead_letters_are_recorded_newest_first_and_counted<DB: Fixture>(name: &str) {
    let h = Harness::<DB>::new(name).await;
    assert_eq!(h.inbox.dead_count(&h.pool).await.unwrap(), 0);
    let record = async |handler_name: &str, event: &str, why: &str, deliveries: u32| {
        h.inbox
            .record_dead(
                &h.pool,
                &handler(handler_name),
                &id(event),
                why,
                deliveries,
                copy(b"{}"),
            )
            .await
            .unwrap();
        // Apart by more than the clock's millisecond, so that the order is the records'.
        tokio::time::sleep(Duration::from_millis(5)).await;
    };
    record("warehouse", "a", "failed on delivery 5 of 5: boom", 5).await;
    record("billing", "a", "deferred 9 times, past max_deferral", 12).await;
    record("warehouse", "b", "failed on delivery 5 of 5: boom", 5).await;
    // a, redelivered from the broker's dead-letter place and given up on again.
    record("warehouse", "a", "failed on delivery 6 of 5: still boom", 6).await;

    assert_eq!(h.inbox.dead_count(&h.pool).await.unwrap(), 3);
    let letters = h.inbox.dead_letters(&h.pool, 10).await.unwrap();
    let seen: Vec<(&str, &str, &str, u32)> = letters
        .iter()
        .map(|l| {
            (
                l.handler.as_str(),
                l.message_id.as_str(),
                l.reason.as_str(),
                l.deliveries,
            )
        })
        .collect();
    assert_eq!(
        seen,
        [
            ("warehouse", "a", "failed on delivery 6 of 5: still boom", 6),
            ("warehouse", "b", "failed on delivery 5 of 5: boom", 5),
            ("billing", "a", "deferred 9 times, past max_deferral", 12),
        ]
    );
    let age = SystemTime::now().duration_since(letters[0].at).unwrap();
    assert!(age < Duration::from_secs(60), "recorded just now: {age:?}");
    assert_eq!(h.inbox.dead_letters(&h.pool, 1).await.unwrap().len(), 1);
}

/// A dead letter keeps its message (body, key, headers, where it goes back) for a retry, shows
/// its first bytes in a list, and is grouped with those that failed the same way; a body over
/// the bound is recorded without a copy; a drop deletes one; the purge goes by its own age.
pub async fn dead_letters_keep_their_message_and_group_by_failure<DB: Fixture>(name: &str) {
    let h = Harness::<DB>::new(name).await;
    let headers = vec![
        ("trace-id".to_owned(), "t-1".to_owned()),
        ("content-type".to_owned(), "application/json".to_owned()),
    ];
    let body = format!("{{\"order\": 42, \"pad\": \"{}\"}}", "x".repeat(400));
    let record = async |handler_name: &str, event: &str, why: &str, body: &[u8]| {
        let copy = DeadCopy {
            headers: &headers,
            ..copy(body)
        };
        h.inbox
            .record_dead(&h.pool, &handler(handler_name), &id(event), why, 5, copy)
            .await
            .unwrap();
        tokio::time::sleep(Duration::from_millis(5)).await;
    };
    record(
        "warehouse",
        "evt_1",
        "no stock for order 41 in 'hall-a'",
        body.as_bytes(),
    )
    .await;
    record(
        "warehouse",
        "evt_2",
        "no stock for order 42 in 'hall-b'",
        b"{}",
    )
    .await;
    record("warehouse", "evt_3", "payments said 503 after 30s", b"{}").await;
    record(
        "billing",
        "evt_1",
        "no stock for order 41 in 'hall-a'",
        b"{}",
    )
    .await;
    let huge = vec![b'z'; KEPT_BODY_BYTES + 1];
    record("billing", "evt_huge", "too big to handle", &huge).await;

    let letters = h.inbox.dead_letters(&h.pool, 10).await.unwrap();
    assert_eq!(letters.len(), 5);
    let first = letters
        .iter()
        .find(|l| l.message_id == "evt_1" && l.handler == "warehouse")
        .unwrap();
    assert_eq!(first.state, DeadState::Dead);
    assert_eq!(first.topic.as_deref(), Some("orders.paid"));
    assert_eq!(first.key.as_deref(), Some("order-42"));
    assert_eq!(first.body_bytes, Some(body.len() as u64));
    assert_eq!(
        first.preview,
        body.as_bytes()[..256],
        "a list shows the first 256 bytes"
    );
    assert!(
        first.headers.is_empty() && first.body.is_none(),
        "a list reads no whole bodies"
    );
    let whole = h
        .inbox
        .dead_letter(&h.pool, "warehouse", "evt_1")
        .await
        .unwrap()
        .unwrap();
    assert_eq!(whole.body.as_deref(), Some(body.as_bytes()));
    assert_eq!(whole.headers, headers);
    let huge_one = h
        .inbox
        .dead_letter(&h.pool, "billing", "evt_huge")
        .await
        .unwrap()
        .unwrap();
    assert_eq!(
        (huge_one.body, huge_one.body_bytes),
        (None, None),
        "over the bound: no copy"
    );
    assert!(
        h.inbox
            .dead_letter(&h.pool, "billing", "evt_2")
            .await
            .unwrap()
            .is_none()
    );

    let groups = DeadGroup::of(&letters);
    let summary: Vec<(&str, &str, usize)> = groups
        .iter()
        .map(|g| (g.handler.as_str(), g.class.as_str(), g.count()))
        .collect();
    assert_eq!(
        summary,
        [
            ("warehouse", "no stock for order # in '…'", 2),
            ("billing", "too big to handle", 1),
            ("billing", "no stock for order # in '…'", 1),
            ("warehouse", "payments said # after #", 1),
        ]
    );
    assert_eq!(
        groups[0].message_ids,
        ["evt_2", "evt_1"],
        "the newest first"
    );
    assert!(groups[0].first_at < groups[0].last_at);
    assert_ne!(
        groups[0].id, groups[2].id,
        "the same class under two handlers: two groups"
    );
    assert_eq!(h.inbox.dead_groups(&h.pool, 100).await.unwrap(), groups);

    assert!(
        h.inbox
            .drop_dead(&h.pool, "warehouse", "evt_3")
            .await
            .unwrap()
    );
    assert!(
        !h.inbox
            .drop_dead(&h.pool, "warehouse", "evt_3")
            .await
            .unwrap()
    );
    assert_eq!(h.inbox.dead_count(&h.pool).await.unwrap(), 4);
    assert_eq!(
        h.inbox
            .purge_dead(&h.pool, Duration::from_secs(3600))
            .await
            .unwrap(),
        0
    );
    tokio::time::sleep(Duration::from_millis(20)).await;
    assert_eq!(
        h.inbox
            .purge_dead(&h.pool, Duration::from_millis(1))
            .await
            .unwrap(),
        4
    );
    assert_eq!(h.inbox.dead_count(&h.pool).await.unwrap(), 0);
}

/// What the tables' own timestamps say happened a minute at a time: claims per handler,
/// dead letters per handler, keys taken; rows older than the span left out.
pub async fn activity_per_minute_reads_the_tables_timestamps<DB: Fixture>(name: &str) {
    use guestlist_sqlx::{KeyStore, PerMinute, SqlKeyStore};
    let h = Harness::<DB>::new(name).await;
    let table = h.inbox.table().to_string();
    // One statement, one clock: the minutes compare exactly.
    h.exec(format!(
        "INSERT INTO {table} (handler, message_id, seen_at) VALUES \
         ('warehouse', 'a', {now}), ('warehouse', 'b', {now}), ('billing', 'a', {now}), \
         ('warehouse', 'old', {three}), ('warehouse', 'older', {two_hours})",
        now = DB::ago(0),
        three = DB::ago(180),
        two_hours = DB::ago(7200)
    ))
    .await;
    let hour = Duration::from_secs(3600);
    let handled = h.inbox.handled_per_minute(&h.pool, hour).await.unwrap();
    let count = |all: &[PerMinute], name: &str| -> Vec<u64> {
        all.iter()
            .filter(|p| p.name == name)
            .map(|p| p.count)
            .collect()
    };
    assert_eq!(count(&handled, "warehouse"), [1, 2], "{handled:?}");
    assert_eq!(count(&handled, "billing"), [1], "{handled:?}");
    let minutes: Vec<i64> = handled
        .iter()
        .filter(|p| p.name == "warehouse")
        .map(|p| p.minute)
        .collect();
    assert_eq!(
        minutes[1] - minutes[0],
        3,
        "three minutes apart: {handled:?}"
    );
    let now_minute = i64::try_from(
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_secs()
            / 60,
    )
    .unwrap();
    assert!(
        (minutes[1] - now_minute).abs() <= 1,
        "this minute: {handled:?}"
    );

    h.inbox
        .record_dead(
            &h.pool,
            &handler("warehouse"),
            &id("p"),
            "boom",
            5,
            copy(b"{}"),
        )
        .await
        .unwrap();
    let dead = h
        .inbox
        .dead_lettered_per_minute(&h.pool, hour)
        .await
        .unwrap();
    assert_eq!(count(&dead, "warehouse"), [1], "{dead:?}");
    assert!((dead[0].minute - now_minute).abs() <= 1, "{dead:?}");

    let keys = SqlKeyStore::with_table(h.pool.clone(), &format!("keys_{}", h.tag)).unwrap();
    h.exec(format!("DROP TABLE IF EXISTS {}", keys.table()))
        .await;
    keys.migrate().await.unwrap();
    let scope = guestlist_sqlx::Scope::new("client-a").unwrap();
    for key in ["k-1", "k-2"] {
        let key = guestlist_sqlx::IdempotencyKey::new(key).unwrap();
        let fingerprint = guestlist_sqlx::Fingerprint::builder("POST", "/orders").body(b"{}");
        keys.claim(&scope, &key, &fingerprint, hour).await.unwrap();
    }
    let taken = keys.taken_per_minute(hour).await.unwrap();
    assert_eq!(count(&taken, "taken"), [2], "{taken:?}");

    let outbox = guestlist_sqlx::Outbox::<DB>::with_table(&format!("ob_{}", h.tag)).unwrap();
    for suffix in ["", "_dead", "_keys", "_relay", "_relays"] {
        h.exec(format!("DROP TABLE IF EXISTS {}{suffix}", outbox.table()))
            .await;
    }
    outbox.migrate(&h.pool).await.unwrap();
    let mut tx = h.pool.begin().await.unwrap();
    for n in 0..2 {
        let topic = guestlist_sqlx::Topic::new("orders.paid").unwrap();
        let message = guestlist_sqlx::Outgoing::new(topic, format!("{n}").into_bytes());
        outbox.enqueue(&mut *tx, &message).await.unwrap();
    }
    tx.commit().await.unwrap();
    let written = outbox.activity_per_minute(&h.pool, hour).await.unwrap();
    assert_eq!(count(&written, "written"), [2], "{written:?}");
    assert!(
        count(&written, "published").is_empty(),
        "none published: {written:?}"
    );
}
