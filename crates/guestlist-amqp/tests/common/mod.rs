//! RabbitMQ as the broker suite's broker.

#![allow(dead_code)] // each test binary uses the parts it needs
#![allow(unreachable_pub)] // a test crate has no public API

use std::time::Duration;

use guestlist_testkit::brokers::{Broker, Received};

/// RabbitMQ: a quorum queue per test (it counts deliveries), a dead-letter exchange and queue.
pub struct Rabbit {
    channel: lapin::Channel,
    queue: String,
    dead_letters: String,
    url: String,
}

impl Rabbit {
    const URL_VAR: &'static str = "GUESTLIST_TEST_AMQP_URL";

    async fn connect(tag: &str) -> Self {
        let url = std::env::var(Self::URL_VAR)
            .unwrap_or_else(|_| "amqp://guest:guest@127.0.0.1:5672/%2f".to_owned());
        let connection = lapin::Connection::connect(&url, lapin::ConnectionProperties::default())
            .await
            .unwrap_or_else(|err| {
                panic!(
                    "RabbitMQ at {url}: {err}\nRun scripts/test.sh, which installs and starts every \
                     service the tests need, or start it with `rabbitmq-server -detached`, or point {} \
                     at a running server.",
                    Self::URL_VAR
                )
            });
        let channel = connection.create_channel().await.unwrap();
        channel
            .confirm_select(lapin::options::ConfirmSelectOptions::default())
            .await
            .unwrap();
        Self {
            channel,
            queue: format!("gl.{tag}"),
            dead_letters: format!("gl.{tag}.dead"),
            url,
        }
    }

    async fn count(&self, queue: &str) -> u64 {
        let declared = self
            .channel
            .queue_declare(
                queue.into(),
                lapin::options::QueueDeclareOptions {
                    passive: true,
                    ..Default::default()
                },
                Default::default(),
            )
            .await
            .unwrap();
        u64::from(declared.message_count())
    }
}

impl Broker for Rabbit {
    type Source = guestlist_amqp::RabbitSource;
    type Publisher = guestlist_amqp::RabbitPublisher;
    const LABEL: &'static str = "RabbitMQ";
    const DEDUPLICATES: bool = false;
    const REDELIVERS_IN_TIME: bool = false;
    const MISSING_TOPIC_ADVICE: &'static str = "bind a queue";
    const TOO_LARGE: Option<usize> = None;

    fn topic(&self) -> String {
        self.queue.clone()
    }

    fn program_args(&self) -> Vec<String> {
        vec!["--amqp".to_owned(), self.url.clone()]
    }

    async fn publisher(&self) -> guestlist_amqp::RabbitPublisher {
        guestlist_amqp::RabbitPublisher::builder(&self.url)
            .connect()
            .await
            .expect("the relay's publisher connects")
    }

    async fn received(&self) -> Vec<Received> {
        use lapin::options::BasicGetOptions;
        use lapin::types::AMQPValue;
        let mut received = Vec::new();
        let take = BasicGetOptions { no_ack: true };
        while let Some(message) = self
            .channel
            .basic_get(self.queue.as_str().into(), take)
            .await
            .unwrap()
        {
            let properties = &message.delivery.properties;
            let header = |name: &str| {
                properties
                    .headers()
                    .as_ref()
                    .and_then(|h| h.inner().get(name).cloned())
            };
            received.push(Received {
                id: properties
                    .message_id()
                    .as_ref()
                    .map(|id| id.to_string())
                    .unwrap_or_default(),
                key: match header("guestlist-ordering-key") {
                    Some(AMQPValue::LongString(key)) => {
                        Some(String::from_utf8_lossy(key.as_bytes()).into_owned())
                    }
                    _ => None,
                },
                seq: match header("guestlist-seq") {
                    Some(AMQPValue::LongLongInt(seq)) => seq,
                    _ => 0,
                },
            });
        }
        received
    }

    async fn open(tag: &str, _ack_wait: Duration) -> Self {
        use lapin::options::{
            ExchangeDeclareOptions, QueueBindOptions, QueueDeclareOptions, QueueDeleteOptions,
        };
        use lapin::types::FieldTable;
        let rabbit = Self::connect(tag).await;
        for queue in [&rabbit.queue, &rabbit.dead_letters] {
            let _ = rabbit
                .channel
                .queue_delete(queue.as_str().into(), QueueDeleteOptions::default())
                .await;
        }
        let durable = QueueDeclareOptions {
            durable: true,
            ..Default::default()
        };
        guestlist_amqp::declare_quorum_queue(&rabbit.channel, &rabbit.queue)
            .await
            .expect("declare the quorum queue");
        rabbit
            .channel
            .exchange_declare(
                rabbit.dead_letters.as_str().into(),
                lapin::ExchangeKind::Fanout,
                ExchangeDeclareOptions {
                    durable: true,
                    ..Default::default()
                },
                FieldTable::default(),
            )
            .await
            .unwrap();
        rabbit
            .channel
            .queue_declare(
                rabbit.dead_letters.as_str().into(),
                durable,
                FieldTable::default(),
            )
            .await
            .unwrap();
        rabbit
            .channel
            .queue_bind(
                rabbit.dead_letters.as_str().into(),
                rabbit.dead_letters.as_str().into(),
                "".into(),
                QueueBindOptions::default(),
                FieldTable::default(),
            )
            .await
            .unwrap();
        rabbit
    }

    async fn attach(tag: &str, _ack_wait: Duration) -> Self {
        Self::connect(tag).await
    }

    async fn horizon_stream(tag: &str) -> Self {
        Self::open(tag, Duration::from_secs(30)).await
    }

    async fn publish_with(&self, payload: &[u8], headers: &[(&str, &str)]) {
        use lapin::types::{AMQPValue, FieldTable, LongString, ShortString};
        let mut table = FieldTable::default();
        for (name, value) in headers {
            table.insert(
                ShortString::from(*name),
                AMQPValue::LongString(LongString::from(*value)),
            );
        }
        self.channel
            .basic_publish(
                "".into(),
                self.queue.as_str().into(),
                lapin::options::BasicPublishOptions::default(),
                payload,
                lapin::BasicProperties::default()
                    .with_delivery_mode(2)
                    .with_headers(table),
            )
            .await
            .expect("publish")
            .await
            .expect("the queue confirmed it");
    }

    async fn missing(&self) -> String {
        guestlist_amqp::RabbitSource::builder(&self.url, "gl.no-such-queue")
            .connect()
            .await
            .unwrap_err()
            .to_string()
    }

    async fn source(&self) -> guestlist_amqp::RabbitSource {
        self.source_at(&self.url).await.expect("consume the queue")
    }

    fn url(&self) -> Option<String> {
        Some(self.url.clone())
    }

    async fn source_at(&self, url: &str) -> Option<guestlist_amqp::RabbitSource> {
        let source = guestlist_amqp::RabbitSource::builder(url, &self.queue)
            .prefetch(100)
            .dead_letter(&self.dead_letters, "")
            .connect()
            .await
            .expect("consume the queue");
        Some(source)
    }

    async fn publisher_at(&self, url: &str) -> Option<guestlist_amqp::RabbitPublisher> {
        let publisher = guestlist_amqp::RabbitPublisher::builder(url)
            .connect()
            .await
            .expect("the relay's publisher connects");
        Some(publisher)
    }

    async fn dead_letter_headers(&self) -> Vec<Vec<(String, String)>> {
        use lapin::options::BasicGetOptions;
        use lapin::types::AMQPValue;
        // Read on a channel of its own, then close it: unacknowledged, they go back.
        let connection =
            lapin::Connection::connect(&self.url, lapin::ConnectionProperties::default())
                .await
                .unwrap();
        let channel = connection.create_channel().await.unwrap();
        let mut all = Vec::new();
        while let Some(message) = channel
            .basic_get(
                self.dead_letters.as_str().into(),
                BasicGetOptions::default(),
            )
            .await
            .unwrap()
        {
            let headers = message
                .delivery
                .properties
                .headers()
                .as_ref()
                .map(|table| {
                    table
                        .inner()
                        .iter()
                        .map(|(name, value)| {
                            let value = match value {
                                AMQPValue::LongString(s) => {
                                    String::from_utf8_lossy(s.as_bytes()).into_owned()
                                }
                                other => format!("{other:?}"),
                            };
                            (name.as_str().to_owned(), value)
                        })
                        .collect()
                })
                .unwrap_or_default();
            all.push(headers);
        }
        let _ = connection.close(200, "read".into()).await;
        all
    }

    async fn outstanding(&self) -> u64 {
        self.count(&self.queue).await
    }

    async fn drained(&self) -> bool {
        // Unacknowledged deliveries are visible to rabbitmqctl only.
        let listed = tokio::process::Command::new("rabbitmqctl")
            .args([
                "list_queues",
                "-q",
                "--no-table-headers",
                "name",
                "messages",
            ])
            .output()
            .await
            .expect("rabbitmqctl");
        let listed = String::from_utf8_lossy(&listed.stdout);
        listed
            .lines()
            .filter_map(|line| line.split_once(char::is_whitespace))
            .find(|(name, _)| *name == self.queue)
            .is_some_and(|(_, messages)| messages.trim() == "0")
    }
}
