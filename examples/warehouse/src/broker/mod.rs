//! Where `OrderPaid` travels: a NATS JetStream stream, a RabbitMQ quorum queue, a Kafka topic
//! or an SQS FIFO queue, named by the broker's URL and one name (`ORDERS`):
//!
//! | `--broker` | `OrderPaid` | `PickTaskCreated` | dead letters |
//! |---|---|---|---|
//! | `nats://host:4222` | stream `ORDERS`, subject `orders.paid` | stream `ORDERS_PICKS`, `orders.picked` | stream `ORDERS_DEAD`, `orders.dead` |
//! | `amqp://user:pw@host:5672/%2f` | quorum queue `ORDERS` | queue `ORDERS.picks` | queue `ORDERS.dead` |
//! | `kafka://host:9092[,host:9092…]` | topic `ORDERS` | topic `ORDERS.picks` | topic `ORDERS.dead` |
//! | `sqs://host:port` (a local SQS such as moto) or `sqs://aws` (from the AWS environment) | FIFO queue `ORDERS.fifo` | `ORDERS-picks.fifo` | `ORDERS-dead.fifo` |
//!
//! The example declares what it needs where missing, so that it runs on an empty broker. Each
//! order's events keep their order on every one of them: a Kafka record's key and an SQS
//! message's group are the order's ordering key.

mod kafka;
mod nats;
mod rabbit;
mod sqs;

use std::time::Duration;

use guestlist::consumer::KeyFrom;

use crate::warehouse::{OrderPaid, PickTaskCreated};

/// Which broker a URL names.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// NATS JetStream (`nats://`).
    Nats,
    /// RabbitMQ (`amqp://`, `amqps://`).
    Rabbit,
    /// Kafka (`kafka://`, then the bootstrap brokers).
    Kafka,
    /// Amazon SQS (`sqs://`, then a local endpoint's `host:port`, or `aws`).
    Sqs,
}

/// A stream, queue or topic on one broker.
#[derive(Debug, Clone)]
pub struct Orders {
    /// `nats://…`, `amqp://…`, `kafka://…` or `sqs://…`.
    pub url: String,
    /// The stream's, queue's or topic's name.
    pub name: String,
}

impl Orders {
    /// The stream, queue or topic `name` on the broker at `url`.
    pub fn new(url: impl Into<String>, name: impl Into<String>) -> Self {
        Self {
            url: url.into(),
            name: name.into(),
        }
    }

    /// Refuses a URL that names no broker the example knows, with what to write instead:
    /// [`kind`](Self::kind) would take it for NATS.
    pub fn check(&self) -> anyhow::Result<()> {
        let scheme = self.url.split("://").next().unwrap_or_default();
        if matches!(scheme, "nats" | "tls" | "amqp" | "amqps" | "kafka" | "sqs")
            && self.url.contains("://")
        {
            return Ok(());
        }
        anyhow::bail!(
            "--broker {}: name the broker by its scheme: nats://host:4222, \
             amqp://user:password@host:5672/%2f, kafka://host:9092 or sqs://host:port (sqs://aws \
             for AWS)",
            self.url
        )
    }

    /// Which broker the URL names; `nats://` unless it names another (see
    /// [`check`](Self::check)).
    pub fn kind(&self) -> Kind {
        let scheme = self.url.split("://").next().unwrap_or_default();
        match scheme {
            "amqp" | "amqps" => Kind::Rabbit,
            "kafka" => Kind::Kafka,
            "sqs" => Kind::Sqs,
            _ => Kind::Nats,
        }
    }

    /// `true` for NATS.
    pub fn is_nats(&self) -> bool {
        self.kind() == Kind::Nats
    }

    /// The NATS subject events are published on.
    pub fn subject(&self) -> String {
        format!("{}.paid", self.name.to_lowercase())
    }

    /// Where the relay sends `OrderPaid`.
    pub fn paid_topic(&self) -> String {
        match self.kind() {
            Kind::Nats => self.subject(),
            Kind::Rabbit | Kind::Kafka => self.name.clone(),
            Kind::Sqs => format!("{}.fifo", self.name),
        }
    }

    /// Where the relay sends `PickTaskCreated`.
    pub fn picks(&self) -> String {
        match self.kind() {
            Kind::Nats => format!("{}.picked", self.name.to_lowercase()),
            Kind::Rabbit | Kind::Kafka => format!("{}.picks", self.name),
            Kind::Sqs => format!("{}-picks.fifo", self.name),
        }
    }

    /// The NATS stream that holds `PickTaskCreated`.
    pub fn picks_stream(&self) -> String {
        format!("{}_PICKS", self.name)
    }

    /// Where poison messages go.
    pub fn dead_letters(&self) -> String {
        match self.kind() {
            Kind::Nats => format!("{}.dead", self.name.to_lowercase()),
            Kind::Rabbit | Kind::Kafka => format!("{}.dead", self.name),
            Kind::Sqs => format!("{}-dead.fifo", self.name),
        }
    }

    /// Kafka's bootstrap brokers: the URL without `kafka://`.
    pub fn kafka_brokers(&self) -> &str {
        self.url.strip_prefix("kafka://").unwrap_or(&self.url)
    }

    /// A local SQS's endpoint (`http://host:port`), or `None` for AWS itself (`sqs://aws`).
    pub fn sqs_endpoint(&self) -> Option<String> {
        match self.url.strip_prefix("sqs://") {
            Some("aws") | None => None,
            Some(address) => Some(format!("http://{address}")),
        }
    }

    /// Creates the streams, queues or topics where missing.
    pub async fn declare(&self) -> anyhow::Result<()> {
        match self.kind() {
            Kind::Nats => nats::declare(self).await,
            Kind::Rabbit => rabbit::declare(self).await,
            Kind::Kafka => kafka::declare(self).await,
            Kind::Sqs => sqs::declare(self).await,
        }
    }

    /// Deletes what [`declare`](Self::declare) makes, where present, with what it holds.
    pub async fn remove(&self) -> anyhow::Result<()> {
        match self.kind() {
            Kind::Nats => nats::remove(self).await,
            Kind::Rabbit => rabbit::remove(self).await,
            Kind::Kafka => kafka::remove(self).await,
            Kind::Sqs => sqs::remove(self).await,
        }
    }

    /// Publishes `event` and waits for the broker to confirm it stored it.
    pub async fn publish(&self, event: &OrderPaid) -> anyhow::Result<()> {
        let payload = serde_json::to_vec(event)?;
        match self.kind() {
            Kind::Nats => nats::publish(self, payload).await,
            Kind::Rabbit => rabbit::publish(self, event, &payload).await,
            Kind::Kafka => kafka::publish(self, event, &payload).await,
            Kind::Sqs => sqs::publish(self, event, payload).await,
        }
    }

    /// What is still on the broker for the warehouse: messages not yet handled or not yet
    /// acknowledged, and dead letters, one line each; empty when all is done.
    pub async fn left_over(&self) -> anyhow::Result<Vec<String>> {
        match self.kind() {
            Kind::Nats => nats::left_over(self).await,
            Kind::Rabbit => rabbit::left_over(self).await,
            Kind::Kafka => kafka::left_over(self).await,
            Kind::Sqs => sqs::left_over(self).await,
        }
    }

    /// Where the warehouse reads an event's ordering key, the customer's: the broker's own
    /// where it keeps one (a Kafka record's key, an SQS message's group: `customer-<c>`, else
    /// `order-<id>`), else the payload's `customer` (NATS, RabbitMQ), events without one in
    /// the order they came.
    pub fn keys(&self) -> KeyFrom {
        match self.kind() {
            Kind::Kafka | Kind::Sqs => KeyFrom::Broker,
            Kind::Nats | Kind::Rabbit => KeyFrom::JsonField("/customer".into()),
        }
    }

    /// The id of every `PickTaskCreated` on the broker, repeats included (the relay publishes
    /// at least once), in no particular order. It takes them off RabbitMQ's and SQS's queues:
    /// there each call returns those that came since the last.
    pub async fn picks_published(&self) -> anyhow::Result<Vec<String>> {
        let payloads = match self.kind() {
            Kind::Nats => nats::picks(self).await?,
            Kind::Rabbit => rabbit::picks(self).await?,
            Kind::Kafka => kafka::picks(self).await?,
            Kind::Sqs => sqs::picks(self).await?,
        };
        Ok(payloads
            .iter()
            .map(|payload| {
                serde_json::from_slice::<PickTaskCreated>(payload)
                    .map_or_else(|_| String::from_utf8_lossy(payload).into_owned(), |p| p.id)
            })
            .collect())
    }

    /// The consumer's NATS source, with `ack_wait`: the durable consumer `warehouse`, created
    /// or bound when this returns.
    pub async fn nats_source(
        &self,
        ack_wait: Duration,
    ) -> anyhow::Result<guestlist::nats::JetStreamSource> {
        nats::source(self, ack_wait).await
    }

    /// The consumer's RabbitMQ source, consuming the queue when this returns.
    pub async fn rabbit_source(&self) -> anyhow::Result<guestlist::amqp::RabbitSource> {
        rabbit::source(self).await
    }

    /// The consumer's Kafka source: a member of the group `warehouse`.
    pub async fn kafka_source(&self) -> anyhow::Result<guestlist::kafka::KafkaSource> {
        kafka::source(self).await
    }

    /// The consumer's SQS source.
    pub async fn sqs_source(&self) -> anyhow::Result<guestlist::sqs::SqsSource> {
        sqs::source(self).await
    }

    /// The relay's Kafka publisher.
    pub async fn kafka_publisher(&self) -> anyhow::Result<guestlist::kafka::KafkaPublisher> {
        Ok(
            guestlist::kafka::KafkaPublisher::builder(self.kafka_brokers())
                .connect()
                .await?,
        )
    }

    /// The relay's SQS publisher.
    pub async fn sqs_publisher(&self) -> anyhow::Result<guestlist::sqs::SqsPublisher> {
        sqs::publisher(self).await
    }
}

#[cfg(test)]
mod tests {
    use super::{Kind, Orders};

    #[test]
    fn a_broker_is_named_by_its_scheme_and_a_typo_is_refused() {
        for (url, kind) in [
            ("nats://127.0.0.1:4222", Kind::Nats),
            ("amqp://guest:guest@127.0.0.1:5672/%2f", Kind::Rabbit),
            ("kafka://127.0.0.1:9092", Kind::Kafka),
            ("sqs://127.0.0.1:5000", Kind::Sqs),
        ] {
            let orders = Orders::new(url, "ORDERS");
            assert!(orders.check().is_ok(), "{url}");
            assert_eq!(orders.kind(), kind, "{url}");
        }
        let typo = Orders::new("kafak://127.0.0.1:9092", "ORDERS").check();
        assert!(typo.unwrap_err().to_string().contains("kafka://host:9092"));
        assert!(Orders::new("127.0.0.1:4222", "ORDERS").check().is_err());
        assert_eq!(
            Orders::new("sqs://aws", "ORDERS").sqs_endpoint(),
            None,
            "sqs://aws is AWS itself"
        );
        assert_eq!(
            Orders::new("sqs://127.0.0.1:5000", "ORDERS").sqs_endpoint(),
            Some("http://127.0.0.1:5000".to_owned())
        );
    }
}
