//! A fresh stream (NATS), quorum queue (RabbitMQ), topic (Kafka) or queue (SQS) per figure,
//! and a fast publisher.

use std::time::Duration;

/// NATS, RabbitMQ, Kafka or SQS, as the bench uses them.
pub(crate) enum Queue {
    Sqs {
        client: guestlist_sqs::Client,
        url: String,
        dead_letters: String,
    },
    Kafka {
        producer: rdkafka::producer::FutureProducer,
        brokers: String,
        topic: String,
    },
    Nats {
        context: async_nats::jetstream::Context,
        url: String,
        stream: String,
    },
    Rabbit {
        channel: lapin::Channel,
        url: String,
        queue: String,
    },
}

/// The NATS server the benches use (`GUESTLIST_BENCH_NATS_URL`).
pub(crate) fn nats_url() -> String {
    std::env::var("GUESTLIST_BENCH_NATS_URL").unwrap_or_else(|_| "nats://127.0.0.1:4222".into())
}

/// The RabbitMQ server the benches use (`GUESTLIST_BENCH_AMQP_URL`).
pub(crate) fn amqp_url() -> String {
    std::env::var("GUESTLIST_BENCH_AMQP_URL")
        .unwrap_or_else(|_| "amqp://guest:guest@127.0.0.1:5672/%2f".into())
}

/// The Kafka brokers the benches use (`GUESTLIST_BENCH_KAFKA_BROKERS`).
pub(crate) fn kafka_brokers() -> String {
    std::env::var("GUESTLIST_BENCH_KAFKA_BROKERS").unwrap_or_else(|_| "127.0.0.1:9092".into())
}

/// The SQS endpoint the benches use (`GUESTLIST_BENCH_SQS_ENDPOINT`): a local server, with
/// dummy credentials.
pub(crate) fn sqs_endpoint() -> String {
    std::env::var("GUESTLIST_BENCH_SQS_ENDPOINT").unwrap_or_else(|_| "http://127.0.0.1:5000".into())
}

/// Partitions of each Kafka topic the bench makes.
const KAFKA_PARTITIONS: i32 = 4;

/// A source of any of the brokers.
pub(crate) enum AnySource {
    Sqs(Box<guestlist_sqs::SqsSource>),
    Kafka(Box<guestlist_kafka::KafkaSource>),
    Nats(Box<guestlist_nats::JetStreamSource>),
    Rabbit(Box<guestlist_amqp::RabbitSource>),
}

impl Queue {
    /// An empty stream or queue named `name`.
    pub(crate) async fn nats(url: &str, name: &str) -> anyhow::Result<Self> {
        use async_nats::jetstream::stream::Config;
        let client = async_nats::connect(url).await?;
        let context = async_nats::jetstream::new(client);
        let _ = context.delete_stream(name).await;
        context
            .create_stream(Config {
                name: name.to_owned(),
                subjects: vec![format!("{name}.events")],
                ..Default::default()
            })
            .await?;
        Ok(Queue::Nats {
            context,
            url: url.to_owned(),
            stream: name.to_owned(),
        })
    }

    /// An empty topic named `name` (and its dead-letter topic).
    pub(crate) async fn kafka(brokers: &str, name: &str) -> anyhow::Result<Self> {
        use rdkafka::admin::{AdminClient, AdminOptions, NewTopic, TopicReplication};
        let admin: AdminClient<rdkafka::client::DefaultClientContext> =
            rdkafka::ClientConfig::new()
                .set("bootstrap.servers", brokers)
                .create()?;
        let options = AdminOptions::new();
        let dead = format!("{name}.dead");
        let _ = admin.delete_topics(&[name, &dead], &options).await;
        for result in admin
            .create_topics(
                &[
                    NewTopic::new(name, KAFKA_PARTITIONS, TopicReplication::Fixed(1)),
                    NewTopic::new(&dead, 1, TopicReplication::Fixed(1)),
                ],
                &options,
            )
            .await?
        {
            result.map_err(|(topic, err)| anyhow::anyhow!("create {topic}: {err}"))?;
        }
        let producer = rdkafka::ClientConfig::new()
            .set("bootstrap.servers", brokers)
            .set("linger.ms", "5")
            .create()?;
        Ok(Queue::Kafka {
            producer,
            brokers: brokers.to_owned(),
            topic: name.to_owned(),
        })
    }

    /// An empty SQS queue named `name` (and its dead-letter queue).
    pub(crate) async fn sqs(endpoint: &str, name: &str) -> anyhow::Result<Self> {
        let client = guestlist_sqs::local_client(endpoint);
        let mut urls = Vec::new();
        for queue in [
            name.replace('_', "-"),
            format!("{}-dead", name.replace('_', "-")),
        ] {
            if let Ok(found) = client.get_queue_url().queue_name(&queue).send().await {
                let _ = client
                    .delete_queue()
                    .set_queue_url(found.queue_url)
                    .send()
                    .await;
            }
            let created = client
                .create_queue()
                .queue_name(&queue)
                .send()
                .await
                .map_err(|err| {
                    anyhow::anyhow!(
                        "create SQS queue {queue} at {endpoint}: {}",
                        guestlist_sqs::aws_sdk_sqs::error::DisplayErrorContext(err)
                    )
                })?;
            urls.push(created.queue_url.unwrap_or_default());
        }
        let dead_letters = urls.pop().unwrap_or_default();
        let url = urls.pop().unwrap_or_default();
        Ok(Queue::Sqs {
            client,
            url,
            dead_letters,
        })
    }

    /// An empty quorum queue named `name`.
    pub(crate) async fn rabbit(url: &str, name: &str) -> anyhow::Result<Self> {
        use lapin::options::{ConfirmSelectOptions, QueueDeleteOptions};
        let connection =
            lapin::Connection::connect(url, lapin::ConnectionProperties::default()).await?;
        let channel = connection.create_channel().await?;
        channel
            .confirm_select(ConfirmSelectOptions::default())
            .await?;
        let _ = channel
            .queue_delete(name.into(), QueueDeleteOptions::default())
            .await;
        guestlist_amqp::declare_quorum_queue(&channel, name).await?;
        Ok(Queue::Rabbit {
            channel,
            url: url.to_owned(),
            queue: name.to_owned(),
        })
    }

    /// Deletes the stream or queue with what it holds, so that a run's figures do not pile up
    /// on the broker (a hundred thousand messages each) and slow the ones measured after.
    pub(crate) async fn remove(&self) -> anyhow::Result<()> {
        match self {
            Queue::Sqs {
                client,
                url,
                dead_letters,
            } => {
                for url in [url, dead_letters] {
                    client.delete_queue().queue_url(url).send().await?;
                }
            }
            Queue::Kafka { brokers, topic, .. } => {
                use rdkafka::admin::{AdminClient, AdminOptions};
                let admin: AdminClient<rdkafka::client::DefaultClientContext> =
                    rdkafka::ClientConfig::new()
                        .set("bootstrap.servers", brokers)
                        .create()?;
                let dead = format!("{topic}.dead");
                admin
                    .delete_topics(&[topic, &dead], &AdminOptions::new())
                    .await?;
            }
            Queue::Nats {
                context, stream, ..
            } => {
                context.delete_stream(stream).await?;
            }
            Queue::Rabbit { channel, queue, .. } => {
                channel
                    .queue_delete(
                        queue.as_str().into(),
                        lapin::options::QueueDeleteOptions::default(),
                    )
                    .await?;
            }
        }
        Ok(())
    }

    /// The topic an outbox message needs to reach this stream or queue: the stream's subject,
    /// the queue's name (through the default exchange).
    pub(crate) fn topic(&self) -> String {
        match self {
            Queue::Sqs { url, .. } => url.clone(),
            Queue::Kafka { topic, .. } => topic.clone(),
            Queue::Nats { stream, .. } => format!("{stream}.events"),
            Queue::Rabbit { queue, .. } => queue.clone(),
        }
    }

    /// A consumer's source, holding up to `prefetch` deliveries.
    pub(super) async fn source(&self, prefetch: u16) -> anyhow::Result<AnySource> {
        Ok(match self {
            Queue::Sqs {
                client,
                url,
                dead_letters,
            } => AnySource::Sqs(Box::new(
                guestlist_sqs::SqsSource::builder(url)
                    .client(client.clone())
                    .dead_letter(dead_letters)
                    .wait_time(Duration::from_secs(1))
                    .connect()
                    .await?,
            )),
            Queue::Kafka { brokers, topic, .. } => {
                let group = format!("bench-{topic}-{}", std::process::id());
                let source = guestlist_kafka::KafkaSource::builder(brokers, &group, topic)
                    .dead_letter(&format!("{topic}.dead"))
                    .connect()
                    .await?;
                // Timed from the group's assignment, as the other brokers' consumers are
                // attached before they are timed.
                anyhow::ensure!(
                    source.joined(Duration::from_secs(60)).await,
                    "the Kafka group assigned no partition within a minute"
                );
                AnySource::Kafka(Box::new(source))
            }
            Queue::Nats { url, stream, .. } => AnySource::Nats(Box::new(
                guestlist_nats::JetStreamSource::builder(url, stream, "bench")
                    .dead_letter("bench.dead")
                    .connect()
                    .await?,
            )),
            Queue::Rabbit { url, queue, .. } => AnySource::Rabbit(Box::new(
                guestlist_amqp::RabbitSource::builder(url, queue)
                    .prefetch(prefetch)
                    .connect()
                    .await?,
            )),
        })
    }
}

/// Runs `$body` with `$source` bound to the concrete source inside `$any`.
macro_rules! with_source {
    ($any:expr, |$source:ident| $body:expr) => {
        match $any {
            $crate::broker::queues::AnySource::Sqs($source) => {
                let $source = *$source;
                $body
            }
            $crate::broker::queues::AnySource::Kafka($source) => {
                let $source = *$source;
                $body
            }
            $crate::broker::queues::AnySource::Nats($source) => {
                let $source = *$source;
                $body
            }
            $crate::broker::queues::AnySource::Rabbit($source) => {
                let $source = *$source;
                $body
            }
        }
    };
}
pub(super) use with_source;
