//! The brokers the suite runs on, each behind the same small API.

use std::future::Future;
use std::time::Duration;

use guestlist_consumer::Source;

/// A broker with one test's queue (or stream) and dead-letter place.
pub trait Broker: Send + Sync + Sized + 'static {
    type Source: Source;
    const LABEL: &'static str;

    /// A fresh queue for the test `tag`; `ack_wait` where the broker has one.
    fn open(tag: &str, ack_wait: Duration) -> impl Future<Output = Self> + Send;
    /// The same queue, from another process.
    fn attach(tag: &str, ack_wait: Duration) -> impl Future<Output = Self> + Send;
    /// Publishes `payload`, waiting for the broker to confirm.
    fn publish(&self, payload: &[u8]) -> impl Future<Output = ()> + Send;
    /// A consumer's source on the queue.
    fn source(&self) -> impl Future<Output = Self::Source> + Send;
    /// Messages in the dead-letter place, with the error each carries.
    fn dead_letters(&self) -> impl Future<Output = Vec<String>> + Send;
    /// Messages not yet acknowledged: waiting, or delivered and in flight.
    fn outstanding(&self) -> impl Future<Output = u64> + Send;
    /// What the broker redelivers after, if it redelivers by itself.
    fn horizon_stream(tag: &str) -> impl Future<Output = Self> + Send;
}

/// NATS JetStream: a stream per test, a durable pull consumer, a dead-letter stream.
pub struct Nats {
    context: async_nats::jetstream::Context,
    stream: String,
    subject: String,
    dead_letters: String,
    dead_letter_stream: String,
    ack_wait: Duration,
    url: String,
}

impl Nats {
    const URL_VAR: &'static str = "GUESTLIST_TEST_NATS_URL";

    async fn connect(tag: &str, ack_wait: Duration) -> Self {
        let url =
            std::env::var(Self::URL_VAR).unwrap_or_else(|_| "nats://127.0.0.1:4222".to_owned());
        let client = async_nats::connect(&url).await.unwrap_or_else(|err| {
            panic!(
                "NATS at {url}: {err}\nRun scripts/test.sh, which installs and starts every service the \
                 tests need, or start it with `nats-server -a 127.0.0.1 -p 4222 -js`, or point {} at a \
                 running server.",
                Self::URL_VAR
            )
        });
        let tag = tag.to_uppercase();
        Self {
            context: async_nats::jetstream::new(client),
            stream: format!("GL_{tag}"),
            subject: format!("gl.{tag}.events"),
            dead_letters: format!("gl.{tag}.dead"),
            dead_letter_stream: format!("GL_{tag}_DEAD"),
            ack_wait,
            url,
        }
    }

    async fn create(&self, max_age: Duration) {
        use async_nats::jetstream::stream::Config;
        for stream in [&self.stream, &self.dead_letter_stream] {
            let _ = self.context.delete_stream(stream).await;
        }
        self.context
            .create_stream(Config {
                name: self.stream.clone(),
                subjects: vec![self.subject.clone()],
                max_age,
                ..Default::default()
            })
            .await
            .expect("create the stream");
        self.context
            .create_stream(Config {
                name: self.dead_letter_stream.clone(),
                subjects: vec![self.dead_letters.clone()],
                ..Default::default()
            })
            .await
            .expect("create the dead-letter stream");
    }
}

impl Broker for Nats {
    type Source = guestlist_nats::JetStreamSource;
    const LABEL: &'static str = "NATS JetStream";

    async fn open(tag: &str, ack_wait: Duration) -> Self {
        let nats = Self::connect(tag, ack_wait).await;
        nats.create(Duration::ZERO).await;
        nats
    }

    async fn attach(tag: &str, ack_wait: Duration) -> Self {
        Self::connect(tag, ack_wait).await
    }

    async fn horizon_stream(tag: &str) -> Self {
        let nats = Self::connect(tag, Duration::from_secs(30)).await;
        nats.create(Duration::from_secs(7 * 24 * 3600)).await;
        nats
    }

    async fn publish(&self, payload: &[u8]) {
        self.context
            .publish(self.subject.clone(), payload.to_vec().into())
            .await
            .expect("publish")
            .await
            .expect("the stream stored it");
    }

    async fn source(&self) -> guestlist_nats::JetStreamSource {
        guestlist_nats::JetStreamSource::connect(
            &self.url,
            &self.stream,
            "warehouse",
            self.ack_wait,
            &self.dead_letters,
        )
        .await
        .expect("bind the consumer")
    }

    async fn dead_letters(&self) -> Vec<String> {
        let mut stream = self
            .context
            .get_stream(&self.dead_letter_stream)
            .await
            .unwrap();
        let count = stream.info().await.unwrap().state.messages;
        let mut errors = Vec::new();
        for sequence in 1..=count {
            let message = stream.get_raw_message(sequence).await.unwrap();
            let error = message
                .headers
                .get("Guestlist-Error")
                .map(|v| v.as_str().to_owned())
                .unwrap_or_default();
            errors.push(error);
        }
        errors
    }

    async fn outstanding(&self) -> u64 {
        let mut stream = self.context.get_stream(&self.stream).await.unwrap();
        match stream.consumer_info("warehouse").await {
            Ok(info) => info.num_pending + info.num_ack_pending as u64,
            Err(_) => stream.info().await.unwrap().state.messages,
        }
    }
}
