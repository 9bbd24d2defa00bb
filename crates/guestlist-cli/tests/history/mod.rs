//! `guestlist history` on each database: one event's whole story, read back in the order it
//! happened, as text and as JSON.

use std::time::Duration;

use guestlist::{
    Claim, HandlerName, IdempotencyKey, Inbox, KeyStore, MessageId, Outbox, Outgoing, Relay,
    SqlKeyStore, Topic,
    keys::{Fingerprint, KeyClaim, Scope, StoredBody, StoredResponse},
    outbox::{Confirmed, OrderingKey, OutboxMessage, Outcomes, Publish},
};
use guestlist_testkit::{Database, Fixture};

use super::{guestlist, stderr, stdout};

/// A broker that confirms every message.
struct Confirming;

impl Publish for Confirming {
    async fn publish(&self, messages: &[OutboxMessage], outcomes: &mut Outcomes) {
        for _ in messages {
            outcomes.push(Ok(Confirmed::New));
        }
    }
}

/// An event's story written through the libraries on tables of the test's own: the shop
/// commits `{p}_evt` to its outbox (key `order-42`), a relay publishes it, the warehouse handler claims it and
/// charges payments with the key carried from it (`warehouse:{p}_evt/charge`, stored 201), a
/// billing handler defers it and then gives up on it; `{p}_dead` goes to the outgoing dead letters, `{p}_next` waits
/// on a shard a relay holds. `guestlist history`
/// shows each, oldest first, from the event's id and from the carried key, and knows nothing of
/// an id never seen.
async fn history_story<DB: Fixture>(p: &str) {
    let database = Database::<DB>::open(4).await;
    let (inbox_table, outbox_table, key_table) = (
        format!("{p}_inbox"),
        format!("{p}_outbox"),
        format!("{p}_keys"),
    );
    for table in [
        format!("{inbox_table}_deferrals"),
        format!("{inbox_table}_dead"),
        inbox_table.clone(),
        format!("{outbox_table}_keys"),
        format!("{outbox_table}_relay"),
        format!("{outbox_table}_relays"),
        format!("{outbox_table}_dead"),
        outbox_table.clone(),
        key_table.clone(),
    ] {
        database.exec(format!("DROP TABLE IF EXISTS {table}")).await;
    }
    let pool = &database.pool;
    let (event, dead, next) = (format!("{p}_evt"), format!("{p}_dead"), format!("{p}_next"));
    let outbox = Outbox::<DB>::with_table(&outbox_table).unwrap();
    outbox.migrate(pool).await.unwrap();
    let enqueue = async |ids: &[&String]| {
        let mut tx = pool.begin().await.unwrap();
        for id in ids {
            let message = Outgoing::new(Topic::new("orders.paid").unwrap(), b"{}".to_vec())
                .id(MessageId::new(id.as_str()).unwrap())
                .ordering_key(OrderingKey::new("order-42").unwrap());
            outbox.enqueue(&mut *tx, &message).await.unwrap();
        }
        tx.commit().await.unwrap();
    };
    // The event, published by a relay that keeps what it published: its stamp names it.
    enqueue(&[&event]).await;
    let relayed = Relay::new(outbox.clone(), pool.clone(), Confirming)
        .keep_published(true)
        .holder("relay-p")
        .drain()
        .await
        .unwrap()
        .expect("no other relay holds the shards");
    assert_eq!(relayed.published, 1);
    tokio::time::sleep(Duration::from_millis(20)).await;
    enqueue(&[&dead, &next]).await;
    database
        .exec(format!(
            "INSERT INTO {outbox_table}_dead (id, message_id, topic, ordering_key, seq, headers, \
             payload, created_at, reason, slot) SELECT id, message_id, topic, ordering_key, seq, \
             headers, payload, created_at, 'refused: no such stream', slot FROM {outbox_table} \
             WHERE message_id = '{dead}'"
        ))
        .await;
    database
        .exec(format!(
            "DELETE FROM {outbox_table} WHERE message_id = '{dead}'"
        ))
        .await;
    tokio::time::sleep(Duration::from_millis(20)).await;
    // Another relay holds every shard now.
    database
        .exec(format!(
            "UPDATE {outbox_table}_relay SET holder = 'relay-a', token = token + 1, \
             lease_until = {}",
            DB::later(3600)
        ))
        .await;
    tokio::time::sleep(Duration::from_millis(20)).await;

    let inbox = Inbox::<DB>::with_table(&inbox_table).unwrap();
    inbox.migrate(pool).await.unwrap();
    let mut tx = pool.begin().await.unwrap();
    let warehouse = HandlerName::new("warehouse").unwrap();
    let claim = inbox
        .claim(
            &mut *tx,
            &warehouse,
            &MessageId::new(event.as_str()).unwrap(),
        )
        .await
        .unwrap();
    assert_eq!(claim, Claim::Fresh);
    tx.commit().await.unwrap();
    tokio::time::sleep(Duration::from_millis(20)).await;

    let keys = SqlKeyStore::with_table(pool.clone(), &key_table).unwrap();
    keys.migrate().await.unwrap();
    let scope = Scope::new("client-shop").unwrap();
    let charge = IdempotencyKey::derive(&format!("warehouse:{event}"), "charge");
    let fingerprint = Fingerprint::builder("POST", "/charges").body(b"{}");
    let KeyClaim::Run { attempt } = keys
        .claim(&scope, &charge, &fingerprint, Duration::from_secs(60))
        .await
        .unwrap()
    else {
        panic!("a new key runs");
    };
    let response = StoredResponse {
        status: 201,
        headers: vec![],
        body: StoredBody::Bytes(b"{\"charge\":\"ch_1\"}".to_vec()),
    };
    keys.complete(&scope, &charge, attempt, &response)
        .await
        .unwrap();
    tokio::time::sleep(Duration::from_millis(20)).await;
    let now_ms = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_millis();
    database
        .exec(format!(
            "INSERT INTO {inbox_table}_deferrals (handler, message_id, deferrals, first_at) \
             VALUES ('billing', '{event}', 2, {now_ms})"
        ))
        .await;
    // Then billing gave up on it: its consumer dead-lettered it, and its inbox recorded that.
    tokio::time::sleep(Duration::from_millis(20)).await;
    let billing = HandlerName::new("billing").unwrap();
    let id = MessageId::new(event.as_str()).unwrap();
    let why = "deferred 2 times over 1s, past the consumer's max_deferral";
    inbox
        .record_dead(
            pool,
            &billing,
            &id,
            why,
            3,
            guestlist::inbox::DeadCopy {
                topic: Some("orders.paid"),
                key: None,
                headers: &[],
                body: b"{}",
            },
        )
        .await
        .unwrap();

    let url = if DB::LABEL == "SQLite" {
        format!("sqlite:{}", database.url)
    } else {
        database.url.clone()
    };
    let tables = [
        "--inbox-table",
        &inbox_table,
        "--outbox-table",
        &outbox_table,
        "--key-table",
        &key_table,
    ];
    let history = |id: &str, json: bool| {
        // `trace`, the command's former name, answers as `history` does.
        let command = if json { "trace" } else { "history" };
        let mut args = vec![command, id, "--database", &url];
        args.extend(tables);
        if json {
            args.push("--json");
        }
        let output = guestlist(&args);
        assert!(output.status.success(), "{}", stderr(&output));
        stdout(&output)
    };

    let shown = history(&event, false);
    let expected = [
        format!("{event} committed to the outbox for orders.paid, key order-42 #1 on shard"),
        format!("{event} published (the broker confirmed it) by relay relay-p (token 1)"),
        format!("{event} handled by warehouse"),
        format!(
            "key warehouse:{event}/charge taken in scope client-shop, attempt 1: stored: status 201"
        ),
        format!("{event} deferred by billing, 2 times so far"),
        format!("{event} dead-lettered by billing after 3 deliveries"),
    ];
    let mut from = 0;
    for line in &expected {
        let at = shown[from..].find(line.as_str()).unwrap_or_else(|| {
            panic!(
                "{}: {line:?} after the lines before it in:\n{shown}",
                DB::LABEL
            )
        });
        from += at;
    }
    assert!(!shown.contains(&dead), "{shown}");

    let carried = history(&format!("warehouse:{event}/charge"), true);
    let json: serde_json::Value = serde_json::from_str(&carried).unwrap();
    assert_eq!(json["carried_from"], serde_json::json!([event]));
    let what: Vec<&str> = json["sightings"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| s["what"].as_str().unwrap())
        .collect();
    assert_eq!(
        what,
        [
            "enqueued",
            "published",
            "claimed",
            "key",
            "deferred",
            "gave_up"
        ],
        "{carried}"
    );
    assert_eq!(json["sightings"][0]["pending"], false, "{carried}");
    assert_eq!(json["sightings"][1]["relay"], "relay-p", "{carried}");
    assert_eq!(json["sightings"][1]["token"], 1, "{carried}");
    let key = &json["sightings"][3];
    assert_eq!(key["status"], 201, "{carried}");
    assert_eq!(key["scope"], "client-shop", "{carried}");
    assert_eq!(json["missing_tables"], serde_json::json!([]), "{carried}");

    let shown = history(&dead, false);
    assert!(
        shown.contains(&format!(
            "{dead} dead-lettered for orders.paid: refused: no such stream"
        )),
        "{shown}"
    );
    let shown = history(&next, false);
    assert!(
        shown.contains(": pending, relay relay-a holds the shard (token 2)"),
        "{shown}"
    );
    let shown = history(&format!("{p}_never"), false);
    assert!(shown.contains("no table knows it"), "{shown}");
}

#[tokio::test]
async fn history_tells_an_events_story_on_sqlite() {
    history_story::<guestlist::sqlx::Sqlite>("trlite").await;
}

#[tokio::test]
async fn history_tells_an_events_story_on_postgres() {
    history_story::<guestlist::sqlx::Postgres>("trpg").await;
}

#[tokio::test]
async fn history_tells_an_events_story_on_mariadb() {
    history_story::<guestlist::sqlx::MySql>("trmy").await;
}
