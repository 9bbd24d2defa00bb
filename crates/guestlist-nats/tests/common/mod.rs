//! NATS JetStream as the broker suite's broker.

#![allow(dead_code)] // each test binary uses the parts it needs
#![allow(unreachable_pub)] // a test crate has no public API

use std::time::Duration;

use guestlist_testkit::brokers::{Broker, Received};

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
    type Publisher = guestlist_nats::JetStreamPublisher;
    const LABEL: &'static str = "NATS JetStream";
    const DEDUPLICATES: bool = true;
    const REDELIVERS_IN_TIME: bool = true;
    const MISSING_TOPIC_ADVICE: &'static str = "nats stream add";
    const ERROR_HEADER: &'static str = "Guestlist-Error";

    fn topic(&self) -> String {
        self.subject.clone()
    }

    fn program_args(&self) -> Vec<String> {
        vec!["--nats".to_owned(), self.url.clone()]
    }

    async fn publisher(&self) -> guestlist_nats::JetStreamPublisher {
        guestlist_nats::JetStreamPublisher::new(self.context.clone())
    }

    async fn stored(&self) -> Option<usize> {
        Some(self.received().await.len())
    }

    async fn received(&self) -> Vec<Received> {
        let mut stream = self.context.get_stream(&self.stream).await.unwrap();
        let state = stream.info().await.unwrap().state.clone();
        let mut received = Vec::new();
        for sequence in state.first_sequence..=state.last_sequence {
            if state.messages == 0 {
                break;
            }
            let message = stream.get_raw_message(sequence).await.unwrap();
            let header = |name: &str| message.headers.get(name).map(|v| v.as_str().to_owned());
            received.push(Received {
                id: header("Nats-Msg-Id").unwrap_or_default(),
                key: header("Guestlist-Ordering-Key"),
                seq: header("Guestlist-Seq").map_or(0, |seq| seq.parse().unwrap()),
            });
        }
        received
    }

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

    async fn publish_with(&self, payload: &[u8], headers: &[(&str, &str)]) {
        let mut map = async_nats::HeaderMap::new();
        for (name, value) in headers {
            map.insert(*name, *value);
        }
        self.context
            .publish_with_headers(self.subject.clone(), map, payload.to_vec().into())
            .await
            .expect("publish")
            .await
            .expect("the stream stored it");
    }

    async fn missing(&self) -> String {
        guestlist_nats::JetStreamSource::builder(&self.url, "GL_NO_SUCH_STREAM", "warehouse")
            .ack_wait(self.ack_wait)
            .dead_letter(&self.dead_letters)
            .connect()
            .await
            .unwrap_err()
            .to_string()
    }

    async fn source(&self) -> guestlist_nats::JetStreamSource {
        self.source_at(&self.url).await.expect("bind the consumer")
    }

    fn url(&self) -> Option<String> {
        Some(self.url.clone())
    }

    async fn source_at(&self, url: &str) -> Option<guestlist_nats::JetStreamSource> {
        let source = guestlist_nats::JetStreamSource::builder(url, &self.stream, "warehouse")
            .ack_wait(self.ack_wait)
            .dead_letter(&self.dead_letters)
            .connect()
            .await
            .expect("bind the consumer");
        Some(source)
    }

    async fn publisher_at(&self, url: &str) -> Option<guestlist_nats::JetStreamPublisher> {
        let client = async_nats::connect(url).await.expect("connect the relay");
        Some(guestlist_nats::JetStreamPublisher::new(
            async_nats::jetstream::new(client),
        ))
    }

    async fn dead_letter_headers(&self) -> Vec<Vec<(String, String)>> {
        let mut stream = self
            .context
            .get_stream(&self.dead_letter_stream)
            .await
            .unwrap();
        let count = stream.info().await.unwrap().state.messages;
        let mut all = Vec::new();
        for sequence in 1..=count {
            let message = stream.get_raw_message(sequence).await.unwrap();
            let headers = guestlist_nats::header_pairs(&message.headers);
            all.push(headers);
        }
        all
    }

    async fn outstanding(&self) -> u64 {
        let mut stream = self.context.get_stream(&self.stream).await.unwrap();
        match stream.consumer_info("warehouse").await {
            Ok(info) => info.num_pending + info.num_ack_pending as u64,
            Err(_) => stream.info().await.unwrap().state.messages,
        }
    }

    async fn drained(&self) -> bool {
        self.outstanding().await == 0
    }
}
