//! The broker suite: the stories every broker must tell the same way, written once over the
//! [`Broker`] trait each broker crate's tests implement for its broker, and the macros
//! ([`broker_suite!`](crate::broker_suite), [`outage_suite!`](crate::outage_suite),
//! [`relay_suite!`](crate::relay_suite)) that turn them into tests. Each story counts effects
//! in the database, never calls.

/// A source whose batch acknowledgements never leave, for the commit-then-kill story.
/// A story's child process: the test binary, running one of the story's ignored tests.
pub mod child;
/// A run told to stop while its database stalls: within its shutdown grace.
pub mod graceful;
pub mod held_acks;
/// The outbox relay's stories.
pub mod relay;
/// One test's broker queue, inbox and effects table, and the handler that counts effects.
pub mod rig;
/// A handler that keeps what it saw of each message.
pub mod seen;
/// The steps stories: a handler's named steps, its consumer killed at each boundary.
pub mod steps;
/// The consumer's stories.
pub mod suite;
mod suites;

use std::future::Future;
use std::time::Duration;

use guestlist_consumer::Source;

use crate::fault_proxy::FaultProxy;

pub use rig::{Pick, Rig, order_paid};

/// A broker with one test's queue (or stream) and dead-letter place.
pub trait Broker: Send + Sync + Sized + 'static {
    /// The consumer runtime's source on this broker.
    type Source: Source;
    /// The outbox relay's publisher to this broker.
    type Publisher: guestlist_sqlx::Publish + 'static;
    /// The broker's name in messages.
    const LABEL: &'static str;
    /// Whether the broker drops a repeated message id on its own.
    const DEDUPLICATES: bool;
    /// Whether the publisher learns that the broker dropped a repeat (not SQS FIFO's).
    const REPORTS_DUPLICATES: bool = Self::DEDUPLICATES;
    /// Whether the broker itself gives none of a key's later messages while an earlier one is
    /// in flight (an SQS FIFO queue's message group), so that a consumer never holds them back.
    const HOLDS_BACK_A_KEY: bool = false;
    /// Keys, and messages of each key, in the story of keys through a consumer killed three
    /// times: fewer where a queue slows down as it grows (moto's SQS FIFO queue checks each
    /// message sent against every one it holds).
    const KEYS_STORY: (usize, usize) = (200, 50);
    /// Publishes in the chaos test: fewer where each publish is slow to make (SQS) or each kill
    /// slow to recover from (Kafka's rebalance).
    const CHAOS_EVENTS: usize = 10_000;
    /// Whether the broker redelivers an unacknowledged message after a wait, and bounds
    /// redeliveries in time (JetStream's ack wait and max age; not RabbitMQ, not Kafka).
    const REDELIVERS_IN_TIME: bool;
    /// What the relay's error says to do about a topic the broker takes nowhere.
    const MISSING_TOPIC_ADVICE: &'static str;

    /// Whether a topic the broker takes nowhere ([`Broker::nowhere`]) is refused for good
    /// (an invalid name), rather than until a queue or stream appears for it.
    const NOWHERE_FOR_GOOD: bool = false;
    /// A body the broker never takes, in bytes; `None` where that is more than every database
    /// here holds in one statement (RabbitMQ's 16 MiB): such a broker is given a header name
    /// it cannot carry instead.
    const TOO_LARGE: Option<usize> = Some(1_100_000);
    /// Messages a relay story publishes beside the one it refuses, on PostgreSQL (a fifth of
    /// it elsewhere).
    const RELAY_STORY_EVENTS: usize = 1_000;
    /// The sharing story's messages and its relays' lease in milliseconds (a fifth of it is the
    /// most a relay starved of CPU may lag between its lease's check and its publish): fewer
    /// messages and a longer lease where each publish is slow to make (SQS on moto). The
    /// stream lasts as long whatever the count: 6,000 (300 a second) keep every move inside
    /// it, where 20,000 ran four to seven times longer beside the rest of the suite than alone
    /// on two cores, once past the runner's five minutes.
    const SHARE_STORY: (usize, u64) = (6_000, 3_000);
    /// A fresh queue for the test `tag`; `ack_wait` where the broker has one.
    fn open(tag: &str, ack_wait: Duration) -> impl Future<Output = Self> + Send;
    /// The same queue, from another process.
    fn attach(tag: &str, ack_wait: Duration) -> impl Future<Output = Self> + Send;
    /// The header (message attribute) a dead letter's error is in.
    const ERROR_HEADER: &'static str = "guestlist-error";
    /// Publishes `payload`, waiting for the broker to confirm.
    fn publish(&self, payload: &[u8]) -> impl Future<Output = ()> + Send {
        self.publish_with(payload, &[])
    }
    /// Publishes `payload` with `headers` (name and text value; message attributes on SQS),
    /// waiting for the broker to confirm.
    fn publish_with(
        &self,
        payload: &[u8],
        headers: &[(&str, &str)],
    ) -> impl Future<Output = ()> + Send;
    /// Publishes `payload` as a message of ordering key `key`, in the header `header` and, where
    /// the broker orders by a key of its own, there too (a Kafka record's key, which picks its
    /// partition; an SQS FIFO message's group), waiting for the broker to confirm.
    fn publish_keyed(
        &self,
        payload: &[u8],
        header: &str,
        key: &str,
    ) -> impl Future<Output = ()> + Send {
        async move { self.publish_with(payload, &[(header, key)]).await }
    }
    /// Publishes many events for a chaos story, each confirmed by the broker, and returns how
    /// many the broker confirmed; a publish it refuses panics with the broker's error. The
    /// story runs this beside its consumers and their kills, in its own task, and awaits it
    /// before it waits for effects. One at a time by default; a broker that slows down as its
    /// queue grows (moto's SQS) keeps the queue short instead.
    fn publish_stream(&self, payloads: Vec<Vec<u8>>) -> impl Future<Output = usize> + Send {
        async move {
            for payload in &payloads {
                self.publish(payload).await;
            }
            payloads.len()
        }
    }
    /// A consumer's source on the queue.
    fn source(&self) -> impl Future<Output = Self::Source> + Send;
    /// The URL (endpoint) the source and the publisher reach the broker at, for a fault proxy
    /// to sit in front of; `None` where no proxy can (Kafka: a client goes where the broker's
    /// metadata says, around the proxy).
    fn url(&self) -> Option<String> {
        None
    }
    /// A fresh queue for the test `tag` that a [`FaultProxy`] can cut the parts off, the proxy,
    /// and the URL through it (for [`Broker::source_at`] and [`Broker::publisher_at`]). By
    /// default the shared broker, with a proxy in front of [`Broker::url`]: the test's own
    /// clients reach the broker directly. A broker that cannot be proxied in front (Kafka)
    /// starts one of the story's own that knows the proxy as its address, so that every client
    /// of it, the test's own too, goes through the proxy. `None` where neither can be done.
    fn open_behind_proxy(
        tag: &str,
        ack_wait: Duration,
    ) -> impl Future<Output = Option<(Self, FaultProxy, String)>> + Send {
        async move {
            let broker = Self::open(tag, ack_wait).await;
            let (proxy, through) = FaultProxy::for_url(&broker.url()?).await;
            Some((broker, proxy, through))
        }
    }
    /// A consumer's source on the queue that reaches the broker at `url` (through a proxy):
    /// `None` where [`Broker::url`] is.
    fn source_at(&self, url: &str) -> impl Future<Output = Option<Self::Source>> + Send {
        let _ = url;
        async { None }
    }
    /// A relay's publisher to the test's queue that reaches the broker at `url`.
    fn publisher_at(&self, url: &str) -> impl Future<Output = Option<Self::Publisher>> + Send {
        let _ = url;
        async { None }
    }
    /// Messages in the dead-letter place, with the error each carries.
    fn dead_letters(&self) -> impl Future<Output = Vec<String>> + Send {
        async {
            self.dead_letter_headers()
                .await
                .into_iter()
                .map(|headers| header_of(&headers, Self::ERROR_HEADER).unwrap_or_default())
                .collect()
        }
    }
    /// The headers (message attributes) of each message in the dead-letter place, in order.
    fn dead_letter_headers(&self) -> impl Future<Output = Vec<Vec<(String, String)>>> + Send;
    /// The payloads of the records below the consumer group's committed offsets, where the
    /// broker keeps a consumer's place as an offset (Kafka); `None` elsewhere.
    fn committed(&self) -> impl Future<Output = Option<Vec<Vec<u8>>>> + Send {
        async { None }
    }
    /// Messages waiting, and (where the broker says so cheaply) delivered but unacknowledged.
    fn outstanding(&self) -> impl Future<Output = u64> + Send;
    /// `true` when no message waits and none is delivered but unacknowledged (exact, maybe slow).
    fn drained(&self) -> impl Future<Output = bool> + Send;
    /// A queue (stream) with a redelivery horizon of a week, where the broker has one.
    fn horizon_stream(tag: &str) -> impl Future<Output = Self> + Send;
    /// The error a consumer of a queue (stream) that does not exist gets.
    fn missing(&self) -> impl Future<Output = String> + Send;
    /// The topic an outbox message needs to reach the test's queue (stream).
    fn topic(&self) -> String;
    /// A topic the broker takes nowhere: no stream captures it, no queue is bound to it.
    fn nowhere(&self, tag: &str) -> String {
        format!("gl.nowhere.{tag}")
    }
    /// A relay's publisher to the test's queue (stream).
    fn publisher(&self) -> impl Future<Output = Self::Publisher> + Send;
    /// The `guestlist` program's arguments that name this broker (`--nats URL`, `--sqs
    /// --sqs-endpoint URL`).
    fn program_args(&self) -> Vec<String>;
    /// How many messages the queue (stream) holds, where that can be read without taking them
    /// off it (not on RabbitMQ).
    fn stored(&self) -> impl Future<Output = Option<usize>> + Send {
        async { None }
    }
    /// Every message on the queue (stream), in the order the broker holds them; RabbitMQ's are
    /// taken off the queue.
    fn received(&self) -> impl Future<Output = Vec<Received>> + Send;
}

/// The value of the header `name` among `headers`.
pub fn header_of(headers: &[(String, String)], name: &str) -> Option<String> {
    headers
        .iter()
        .find(|(n, _)| n == name)
        .map(|(_, value)| value.clone())
}

/// A message as a relay published it: its id, ordering key and place.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Received {
    /// The message id the relay gave the broker.
    pub id: String,
    /// Its ordering key, where the broker carries one.
    pub key: Option<String>,
    /// Its place on the queue (stream), in the order the broker holds it.
    pub seq: i64,
}
