//! The outbox's stories, run against every backend by [`outbox_suite!`](crate::outbox_suite).

use std::sync::Arc;
use std::time::Duration;

use guestlist_sqlx::{Error, MessageId, OrderingKey, Outbox, Outgoing, Purged, Retention, Topic};
use guestlist_testkit::{Database, Fixture, short_tag};

/// A test's database and its own outbox table.
struct Setup<DB: Fixture> {
    database: Database<DB>,
    outbox: Outbox<DB>,
}

impl<DB: Fixture> Setup<DB> {
    async fn new(name: &str) -> Self {
        let database = Database::<DB>::open(32).await;
        let outbox = Outbox::with_table(&format!("ob_{}", short_tag(name))).unwrap();
        for table in [
            format!("{}_keys", outbox.table()),
            format!("{}_relay", outbox.table()),
            format!("{}_relays", outbox.table()),
            format!("{}_dead", outbox.table()),
            outbox.table().to_string(),
        ] {
            database.exec(format!("DROP TABLE IF EXISTS {table}")).await;
        }
        outbox.migrate(&database.pool).await.unwrap();
        Self { database, outbox }
    }

    async fn rows(&self) -> i64 {
        let table = self.outbox.table();
        self.database
            .scalar(format!("SELECT count(*) FROM {table}"))
            .await
    }
}

fn paid(order: u32) -> Outgoing {
    Outgoing::new(
        Topic::new("orders.paid").unwrap(),
        format!(r#"{{"order":{order}}}"#).into_bytes(),
    )
}

pub async fn a_rolled_back_write_enqueues_nothing<DB: Fixture>(name: &str) {
    let s = Setup::<DB>::new(name).await;
    let mut tx = s.database.pool.begin().await.unwrap();
    s.outbox.enqueue(&mut *tx, &paid(1)).await.unwrap();
    tx.rollback().await.unwrap();
    assert_eq!(s.rows().await, 0, "the message went with the rollback");

    let mut tx = s.database.pool.begin().await.unwrap();
    let message = paid(2).header("content-type", "application/json");
    let enqueued = s.outbox.enqueue(&mut *tx, &message).await.unwrap();
    tx.commit().await.unwrap();
    assert!(enqueued.added && enqueued.message_id.as_str().starts_with("msg_"));
    let table = s.outbox.table();
    let id = enqueued.message_id.as_str();
    assert_eq!(
        s.database
            .scalar(format!(
                "SELECT count(*) FROM {table} WHERE message_id = '{id}' AND topic = 'orders.paid' \
                 AND published_at IS NULL AND seq = 0"
            ))
            .await,
        1,
        "the committed message waits for the relay under its id"
    );
}

pub async fn an_enqueue_outside_a_transaction_is_refused<DB: Fixture>(name: &str) {
    let s = Setup::<DB>::new(name).await;
    let mut conn = s.database.pool.acquire().await.unwrap();
    let err = s.outbox.enqueue(&mut conn, &paid(1)).await.unwrap_err();
    assert!(matches!(err, Error::NotInTransaction), "{err}");
    assert!(err.to_string().contains("pool.begin()"), "{err}");
    assert_eq!(s.rows().await, 0);
}

pub async fn an_id_enqueued_twice_is_added_once<DB: Fixture>(name: &str) {
    let s = Setup::<DB>::new(name).await;
    let id = MessageId::new("evt_order1_paid").unwrap();
    for attempt in 0..3 {
        let mut tx = s.database.pool.begin().await.unwrap();
        let enqueued = s
            .outbox
            .enqueue(&mut *tx, &paid(1).id(id.clone()))
            .await
            .unwrap();
        tx.commit().await.unwrap();
        assert_eq!(enqueued.message_id, id);
        assert_eq!(enqueued.added, attempt == 0, "attempt {attempt}");
    }
    // On a key too, where a repeat would otherwise leave a gap in the key's places: the message
    // after two repeats takes the place right after the first.
    let key = OrderingKey::new("order-1").unwrap();
    let mut places = Vec::new();
    for n in [7, 7, 7, 8] {
        let mut tx = s.database.pool.begin().await.unwrap();
        let message = paid(n)
            .id(MessageId::new(format!("evt_keyed_{n}")).unwrap())
            .ordering_key(key.clone());
        places.push(s.outbox.enqueue(&mut *tx, &message).await.unwrap().seq);
        tx.commit().await.unwrap();
    }
    assert_eq!(places, [1, 0, 0, 2], "no gap after a repeat");
    let mut tx = s.database.pool.begin().await.unwrap();
    let first = s.outbox.enqueue(&mut *tx, &paid(2)).await.unwrap();
    let second = s.outbox.enqueue(&mut *tx, &paid(2)).await.unwrap();
    tx.commit().await.unwrap();
    assert_ne!(
        first.message_id, second.message_id,
        "without an id, each message gets a new one"
    );
    assert_eq!(s.rows().await, 5);
}

pub async fn a_keys_messages_take_their_places_in_commit_order<DB: Fixture>(name: &str) {
    let s = Arc::new(Setup::<DB>::new(name).await);
    let key = OrderingKey::new("order-42").unwrap();
    let on_key = |n: u32| paid(n).ordering_key(key.clone());

    // The first transaction holds the key; the second waits for it, then comes after it.
    let mut first = s.database.pool.begin().await.unwrap();
    assert_eq!(
        s.outbox.enqueue(&mut *first, &on_key(1)).await.unwrap().seq,
        1
    );
    let second = tokio::spawn({
        let (s, message) = (Arc::clone(&s), on_key(2));
        async move {
            let mut tx = s.database.pool.begin().await.unwrap();
            let seq = s.outbox.enqueue(&mut *tx, &message).await.unwrap().seq;
            tx.commit().await.unwrap();
            seq
        }
    });
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert!(
        !second.is_finished(),
        "the second waits while the first holds the key"
    );
    first.commit().await.unwrap();
    assert_eq!(second.await.unwrap(), 2);

    // A transaction that rolls back gives its place back.
    let mut rolled_back = s.database.pool.begin().await.unwrap();
    assert_eq!(
        s.outbox
            .enqueue(&mut *rolled_back, &on_key(3))
            .await
            .unwrap()
            .seq,
        3
    );
    rolled_back.rollback().await.unwrap();

    // Sixteen at once: sixteen places, none shared, none skipped.
    let writers: Vec<_> = (0..16)
        .map(|n| {
            let (s, message) = (Arc::clone(&s), on_key(10 + n));
            tokio::spawn(async move {
                let mut tx = s.database.pool.begin().await.unwrap();
                let seq = s.outbox.enqueue(&mut *tx, &message).await.unwrap().seq;
                tokio::time::sleep(Duration::from_millis(5)).await;
                tx.commit().await.unwrap();
                seq
            })
        })
        .collect();
    let mut seqs = Vec::new();
    for writer in writers {
        seqs.push(writer.await.unwrap());
    }
    seqs.sort_unstable();
    assert_eq!(seqs, (3..19).collect::<Vec<i64>>());

    // Another key starts at 1; no key, no place.
    let mut tx = s.database.pool.begin().await.unwrap();
    let other = paid(99).ordering_key(OrderingKey::new("order-43").unwrap());
    assert_eq!(s.outbox.enqueue(&mut *tx, &other).await.unwrap().seq, 1);
    assert_eq!(s.outbox.enqueue(&mut *tx, &paid(100)).await.unwrap().seq, 0);
    tx.commit().await.unwrap();
}

pub async fn published_messages_are_purged_and_pending_ones_stay<DB: Fixture>(name: &str) {
    let s = Setup::<DB>::new(name).await;
    let mut tx = s.database.pool.begin().await.unwrap();
    let mut ids = Vec::new();
    for n in 0..3 {
        ids.push(
            s.outbox
                .enqueue(&mut *tx, &paid(n))
                .await
                .unwrap()
                .message_id,
        );
    }
    tx.commit().await.unwrap();
    let table = s.outbox.table();
    for (id, age) in [(&ids[0], 8 * 86_400), (&ids[1], 3600)] {
        s.database
            .exec(format!(
                "UPDATE {table} SET published_at = {} WHERE message_id = '{}'",
                DB::ago(age),
                id.as_str()
            ))
            .await;
    }
    let week = Retention::new(Duration::from_secs(7 * 86_400), Duration::from_secs(60)).unwrap();
    let purge = s.outbox.purge(week);
    assert_eq!(
        purge.run(&s.database.pool).await.unwrap(),
        Purged::Deleted(1)
    );
    assert_eq!(
        s.rows().await,
        2,
        "published an hour ago, and not yet published, stay"
    );
}

/// A row's slot is the hash of its key (of its id without one), the same from every writer; a new
/// table has 16 shards; the count changes only under every shard's lease: while a relay holds
/// one, the change waits, gives up naming it and changes nothing, and once the lease has ended
/// it changes the count, up or down, as often as asked.
pub async fn rows_carry_their_slot_and_the_shard_count_changes_under_every_lease<DB: Fixture>(
    name: &str,
) {
    let setup = Setup::<DB>::new(name).await;
    let (outbox, pool) = (&setup.outbox, &setup.database.pool);
    let table = outbox.table();
    let mut tx = pool.begin().await.unwrap();
    let keyed = paid(42).ordering_key(OrderingKey::new("order-42").unwrap());
    let keyed = outbox.enqueue(&mut *tx, &keyed).await.unwrap();
    let keyless = outbox.enqueue(&mut *tx, &paid(43)).await.unwrap();
    tx.commit().await.unwrap();
    let slot = |id: MessageId| {
        let database = &setup.database;
        async move {
            database
                .scalar(format!(
                    "SELECT slot + 0 * id FROM {table} WHERE message_id = '{}'",
                    id.as_str()
                ))
                .await
        }
    };
    // `printf order-42 | sha256sum` begins 3bf8.
    assert_eq!(slot(keyed.message_id).await, 0x3bf8);
    let expected = guestlist_core::protocol::slot(None, keyless.message_id.as_str());
    assert_eq!(slot(keyless.message_id).await, i64::from(expected));
    assert_eq!(outbox.shard_count(pool).await.unwrap(), 16);

    // A relay holds shard 3.
    setup
        .database
        .exec(format!(
            "UPDATE {table}_relay SET holder = 'relay-a', token = token + 1, lease_until = {} \
             WHERE shard = 3",
            DB::later(3600)
        ))
        .await;
    let refused = outbox
        .set_shards(pool, 4, Duration::from_millis(300))
        .await
        .unwrap_err();
    assert!(
        matches!(&refused, Error::ShardsHeld { holders, .. } if holders == &["relay-a"]),
        "{refused:?}"
    );
    assert!(refused.to_string().contains("stop them first"), "{refused}");
    assert_eq!(outbox.shard_count(pool).await.unwrap(), 16, "unchanged");
    let stats = outbox.stats(pool).await.unwrap();
    assert_eq!(
        stats.unheld().len(),
        15,
        "the change gave back what it took"
    );

    setup
        .database
        .exec(format!(
            "UPDATE {table}_relay SET lease_until = {} WHERE shard = 3",
            DB::ago(1)
        ))
        .await;
    outbox
        .set_shards(pool, 4, Duration::from_secs(5))
        .await
        .unwrap();
    assert_eq!(outbox.shard_count(pool).await.unwrap(), 4);
    let stats = outbox.stats(pool).await.unwrap();
    assert_eq!(stats.shards.len(), 4);
    assert_eq!(stats.unheld().len(), 4, "every lease given back");
    assert_eq!(
        stats.shards.iter().map(|s| s.pending).sum::<u64>(),
        2,
        "each shard's backlog adds up to the table's"
    );
    // The highest token given so far: the shards dropped and added back start past it, so
    // that a relay still holding one of their old tokens cannot fence them.
    let newest = setup
        .database
        .scalar(format!("SELECT max(token) FROM {table}_relay"))
        .await;
    outbox
        .set_shards(pool, 32, Duration::from_secs(5))
        .await
        .unwrap();
    assert_eq!(outbox.shard_count(pool).await.unwrap(), 32);
    let oldest = setup
        .database
        .scalar(format!("SELECT min(token) FROM {table}_relay"))
        .await;
    assert!(
        oldest >= newest,
        "tokens from {oldest}, given up to {newest}"
    );
    assert_eq!(outbox.stats(pool).await.unwrap().shards.len(), 32);
}

/// A table made before shards (no `slot`, one lease row without a count, no publisher columns)
/// is upgraded by the migration in place: its rows and new ones get a slot (0 for the old:
/// shard 0), it keeps one shard until an operator changes the count, and migrating again
/// changes nothing.
pub async fn a_table_made_before_shards_is_upgraded_to_one_shard<DB: Fixture>(name: &str) {
    let setup = Setup::<DB>::new(name).await;
    let (outbox, pool, database) = (&setup.outbox, &setup.database.pool, &setup.database);
    let table = outbox.table();
    // Back to the tables as they were.
    database
        .exec(format!("ALTER TABLE {table} DROP COLUMN slot"))
        .await;
    database
        .exec(format!("ALTER TABLE {table}_dead DROP COLUMN slot"))
        .await;
    database
        .exec(format!("ALTER TABLE {table}_relay DROP COLUMN shards"))
        .await;
    for column in ["published_by", "published_token"] {
        database
            .exec(format!("ALTER TABLE {table} DROP COLUMN {column}"))
            .await;
    }
    database
        .exec(format!("DELETE FROM {table}_relay WHERE shard > 0"))
        .await;
    database
        .exec(format!(
            "INSERT INTO {table} (message_id, topic, seq, payload) VALUES ('evt_old', 't', 0, {})",
            "'{}'"
        ))
        .await;
    database
        .exec(format!(
            "INSERT INTO {table} (message_id, topic, ordering_key, seq, payload) \
             VALUES ('evt_old_keyed', 't', 'order-42', 1, {})",
            "'{}'"
        ))
        .await;
    outbox.migrate(pool).await.unwrap();
    outbox.migrate(pool).await.unwrap();
    assert_eq!(outbox.shard_count(pool).await.unwrap(), 1);
    assert_eq!(
        database
            .scalar(format!(
                "SELECT slot + 0 * id FROM {table} WHERE message_id = 'evt_old'"
            ))
            .await,
        0
    );
    let mut tx = pool.begin().await.unwrap();
    let keyed = paid(42).ordering_key(OrderingKey::new("order-42").unwrap());
    outbox.enqueue(&mut *tx, &keyed).await.unwrap();
    tx.commit().await.unwrap();
    assert_eq!(
        database
            .scalar(format!("SELECT max(slot + 0 * id) FROM {table}"))
            .await,
        0x3bf8
    );
    let stats = outbox.stats(pool).await.unwrap();
    assert_eq!((stats.pending, stats.shards.len()), (3, 1));
    // And the columns of a kept row's publisher, empty until a relay stamps one.
    assert_eq!(
        database
            .scalar(format!(
                "SELECT count(*) FROM {table} WHERE published_by IS NULL AND published_token IS NULL"
            ))
            .await,
        3
    );

    // Spread over shards, the older rows take their own slots: the key's older message goes
    // where its newer one is, not to shard 0.
    outbox
        .set_shards(pool, 16, Duration::from_secs(5))
        .await
        .unwrap();
    let slot = |id: &'static str| {
        database.scalar(format!(
            "SELECT slot + 0 * id FROM {table} WHERE message_id = '{id}'"
        ))
    };
    assert_eq!(slot("evt_old_keyed").await, 0x3bf8);
    let own = guestlist_core::protocol::slot(None, "evt_old");
    assert_eq!(slot("evt_old").await, i64::from(own));
}
