//! Publishers that are not ours: an ordinary AMQP client sets the `message_id` property and
//! puts no id in the body. `IdFrom::BrokerId` claims each message under that id, so a copy
//! published again is a duplicate.

use std::time::{Duration, Instant};

use guestlist_consumer::{Consumer, Delivery, IdFrom, Message, Source};
use guestlist_core::HandlerName;
use guestlist_sqlx::Inbox;
use guestlist_testkit::Database;
use lapin::options::{
    BasicPublishOptions, ConfirmSelectOptions, QueueDeclareOptions, QueueDeleteOptions,
};
use lapin::types::{AMQPValue, FieldTable, LongString, ShortString};
use lapin::{BasicProperties, Channel, Connection, ConnectionProperties};

/// A quorum queue of its own, published to with plain lapin, as any client would.
struct Queue {
    url: String,
    name: String,
    channel: Channel,
    _connection: Connection,
}

impl Queue {
    async fn fresh(name: &str) -> Self {
        let url = std::env::var("GUESTLIST_TEST_AMQP_URL")
            .unwrap_or_else(|_| "amqp://guest:guest@127.0.0.1:5672/%2f".to_owned());
        let connection = Connection::connect(&url, ConnectionProperties::default())
            .await
            .unwrap_or_else(|err| {
                panic!("RabbitMQ at {url}: {err}\nRun scripts/test.sh, which starts it, or set GUESTLIST_TEST_AMQP_URL.")
            });
        let channel = connection.create_channel().await.unwrap();
        let _ = channel
            .queue_delete(ShortString::from(name), QueueDeleteOptions::default())
            .await;
        let channel = connection.create_channel().await.unwrap(); // a failed delete closes its channel
        guestlist_amqp::declare_quorum_queue(&channel, name)
            .await
            .unwrap();
        channel
            .confirm_select(ConfirmSelectOptions::default())
            .await
            .unwrap();
        Self {
            url,
            name: name.to_owned(),
            channel,
            _connection: connection,
        }
    }

    async fn publish(&self, body: &[u8], properties: BasicProperties) {
        self.channel
            .basic_publish(
                ShortString::from(""),
                ShortString::from(self.name.as_str()),
                BasicPublishOptions::default(),
                body,
                properties,
            )
            .await
            .unwrap()
            .await
            .expect("the queue confirms the message");
    }

    async fn waiting(&self) -> u32 {
        self.channel
            .queue_declare(
                ShortString::from(self.name.as_str()),
                QueueDeclareOptions {
                    passive: true,
                    ..QueueDeclareOptions::default()
                },
                FieldTable::default(),
            )
            .await
            .unwrap()
            .message_count()
    }

    async fn remove(self) {
        let _ = self
            .channel
            .queue_delete(
                ShortString::from(self.name.as_str()),
                QueueDeleteOptions::default(),
            )
            .await;
    }
}

/// What pika's `BasicProperties(message_id=id)` puts on the wire: the property, nothing else.
fn message_id_only(id: &str) -> BasicProperties {
    BasicProperties::default().with_message_id(ShortString::from(id))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_plain_clients_message_id_is_the_id_claimed() {
    let queue = Queue::fresh("gl.plain_client_message_id").await;
    // The body has no id: only the property says which event this is.
    for _ in 0..3 {
        queue
            .publish(br#"{"order": 42}"#, message_id_only("evt_pika_1"))
            .await;
    }
    queue
        .publish(br#"{"order": 43}"#, message_id_only("evt_pika_2"))
        .await;

    let db = Database::<sqlx::Sqlite>::open(4).await;
    let inbox = Inbox::<sqlx::Sqlite>::with_table("plain_client_inbox").unwrap();
    inbox.migrate(&db.pool).await.unwrap();
    db.exec("CREATE TABLE picks (event TEXT NOT NULL)".to_owned())
        .await;
    let source = guestlist_amqp::RabbitSource::builder(&queue.url, &queue.name)
        .prefetch(10)
        .connect()
        .await
        .unwrap();
    let consumer = Consumer::new(
        source,
        db.pool.clone(),
        inbox,
        HandlerName::new("warehouse").unwrap(),
        IdFrom::BrokerId,
        async |tx: &mut sqlx::SqliteConnection, message: &Message| {
            sqlx::query("INSERT INTO picks (event) VALUES (?1)")
                .bind(message.id.as_str())
                .execute(&mut *tx)
                .await
                .map(drop)
        },
    );
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let task = tokio::spawn(consumer.run(async move {
        let _ = stopped.await;
    }));
    let deadline = Instant::now() + Duration::from_secs(30);
    while db.scalar("SELECT count(*) FROM picks".to_owned()).await < 2 || queue.waiting().await > 0
    {
        assert!(
            Instant::now() < deadline,
            "the four messages were not consumed"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    stop.send(()).unwrap();
    let handled = task.await.unwrap().unwrap();
    assert_eq!(handled.dead_lettered, 0, "every message had its id");
    let picks = |event: &str| {
        db.scalar(format!(
            "SELECT count(*) FROM picks WHERE event = '{event}'"
        ))
    };
    assert_eq!(picks("evt_pika_1").await, 1, "three copies, one run");
    assert_eq!(picks("evt_pika_2").await, 1);
    queue.remove().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_message_id_too_long_for_the_property_is_read_from_its_header() {
    let queue = Queue::fresh("gl.long_message_id").await;
    // RabbitMQ hands an AMQP 1.0 publisher's message-id of more than 256 bytes to AMQP 0-9-1
    // consumers in this header, with no message_id property.
    let long = format!("evt_{}", "x".repeat(300));
    let mut headers = FieldTable::default();
    headers.insert(
        "x-message-id".into(),
        AMQPValue::LongString(LongString::from(long.as_str())),
    );
    queue
        .publish(
            b"{}",
            BasicProperties::default().with_headers(headers.clone()),
        )
        .await;
    queue.publish(b"{}", message_id_only("evt_short")).await;
    let mut source = guestlist_amqp::RabbitSource::builder(&queue.url, &queue.name)
        .prefetch(10)
        .connect()
        .await
        .unwrap();
    let mut deliveries = Vec::new();
    let deadline = Instant::now() + Duration::from_secs(30);
    while deliveries.len() < 2 {
        assert!(Instant::now() < deadline, "both messages arrive");
        deliveries.extend(source.fetch(2).await.unwrap());
    }
    assert_eq!(deliveries[0].broker_id(), Some(long.as_str()));
    assert_eq!(deliveries[1].broker_id(), Some("evt_short"));
    for delivery in &deliveries {
        delivery.ack().await.unwrap();
    }
    queue.remove().await;
}
