//! The consumer side: a durable JetStream pull consumer, and the settings that bind it.

use std::time::Duration;

use async_nats::jetstream;
use async_nats::jetstream::consumer::{AckPolicy, PullConsumer, pull};
use futures_util::StreamExt;
use guestlist_consumer::{BoxError, Source};

use crate::{Error, JetStreamDelivery};

/// Deliveries from a durable JetStream pull consumer.
pub struct JetStreamSource {
    context: jetstream::Context,
    consumer: PullConsumer,
    ack_wait: Duration,
    horizon: Option<Duration>,
    dead_letters: String,
    fetch_wait: Duration,
    confirmed_acks: bool,
    /// Where a consumer that orders by key stands with a dead process's messages (see
    /// [`JetStreamSource::catch_up`]).
    catch_up: CatchUp,
}

impl std::fmt::Debug for JetStreamSource {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("JetStreamSource")
            .field("ack_wait", &self.ack_wait)
            .field("dead_letters", &self.dead_letters)
            .finish_non_exhaustive()
    }
}

/// Where a consumer that orders by key stands with the messages a process before it died with.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum CatchUp {
    /// Not yet asked the server.
    Unchecked,
    /// Waiting until then for them to be due for redelivery.
    Until(tokio::time::Instant),
    /// Nothing to wait for (or not ordering by key).
    Done,
}

/// Settings for a [`JetStreamSource`]; [`connect`](Self::connect) binds it.
#[derive(Debug, Clone)]
#[must_use]
pub struct JetStreamSourceBuilder {
    url: String,
    stream: String,
    durable: String,
    ack_wait: Duration,
    dead_letters: Option<String>,
    fetch_wait: Duration,
    confirmed_acks: bool,
}

impl JetStreamSource {
    /// How long the server waits for an acknowledgement before redelivering, unless set.
    pub const DEFAULT_ACK_WAIT: Duration = Duration::from_secs(30);

    /// Settings for the durable pull consumer `durable` on `stream`, on the NATS server at
    /// `url`.
    ///
    /// ```no_run
    /// # async fn run() -> Result<(), guestlist_nats::Error> {
    /// let source = guestlist_nats::JetStreamSource::builder("nats://127.0.0.1:4222", "ORDERS", "warehouse")
    ///     .dead_letter("ORDERS.dead")
    ///     .connect()
    ///     .await?;
    /// # let _ = source; Ok(()) }
    /// ```
    pub fn builder(url: &str, stream: &str, durable: &str) -> JetStreamSourceBuilder {
        JetStreamSourceBuilder {
            url: url.to_owned(),
            stream: stream.to_owned(),
            durable: durable.to_owned(),
            ack_wait: Self::DEFAULT_ACK_WAIT,
            dead_letters: None,
            fetch_wait: Duration::from_millis(250),
            confirmed_acks: false,
        }
    }

    fn delivery(&self, message: jetstream::Message) -> JetStreamDelivery {
        let delivered = message.info().map(|info| info.delivered).unwrap_or(1);
        JetStreamDelivery {
            message,
            delivered: u32::try_from(delivered).unwrap_or(u32::MAX),
            context: self.context.clone(),
            dead_letters: self.dead_letters.clone(),
            confirmed_acks: self.confirmed_acks,
        }
    }
}

impl JetStreamSourceBuilder {
    /// The subject poison messages are published to, with their error in a `Guestlist-Error`
    /// header (required: some stream should capture it).
    pub fn dead_letter(mut self, subject: &str) -> Self {
        self.dead_letters = Some(subject.to_owned());
        self
    }

    /// How long the server waits for an acknowledgement before redelivering (default 30 s,
    /// [`JetStreamSource::DEFAULT_ACK_WAIT`]); set on the durable consumer when it is created.
    pub fn ack_wait(mut self, wait: Duration) -> Self {
        self.ack_wait = wait;
        self
    }

    /// How long a fetch waits for a first message when none is ready, before it returns empty
    /// (default 250 ms). A fetch returns as soon as one message is there.
    pub fn fetch_wait(mut self, wait: Duration) -> Self {
        self.fetch_wait = wait;
        self
    }

    /// Waits for the server to confirm every acknowledgement (a double ack, one round trip per
    /// message) instead of sending a batch's acks together and flushing once (default off).
    /// guestlist does not need it: an acknowledgement lost after the commit brings a
    /// redelivery, which the inbox answers as a duplicate.
    pub fn confirmed_acks(mut self, on: bool) -> Self {
        self.confirmed_acks = on;
        self
    }

    /// Connects and binds the durable consumer (created if missing, with explicit acks and the
    /// ack wait); refuses a stream that does not exist and a missing dead-letter subject.
    pub async fn connect(self) -> Result<JetStreamSource, Error> {
        let dead_letters = self.dead_letters.ok_or(Error::NoDeadLetterSubject)?;
        let context = crate::connect(&self.url).await?;
        let mut handle =
            context
                .get_stream(&self.stream)
                .await
                .map_err(|_| Error::MissingStream {
                    stream: self.stream.clone(),
                })?;
        let info = handle
            .info()
            .await
            .map_err(|e| Error::JetStream(e.to_string()))?;
        let max_age = info.config.max_age;
        let consumer: PullConsumer = handle
            .get_or_create_consumer(
                &self.durable,
                pull::Config {
                    durable_name: Some(self.durable.clone()),
                    ack_policy: AckPolicy::Explicit,
                    ack_wait: self.ack_wait,
                    ..Default::default()
                },
            )
            .await
            .map_err(|e| Error::JetStream(e.to_string()))?;
        Ok(JetStreamSource {
            context,
            consumer,
            ack_wait: self.ack_wait,
            horizon: (!max_age.is_zero()).then_some(max_age),
            dead_letters,
            fetch_wait: self.fetch_wait,
            confirmed_acks: self.confirmed_acks,
            catch_up: CatchUp::Done,
        })
    }
}

impl JetStreamSource {
    /// How long past the ack wait a consumer that orders by key waits before its first fetch,
    /// when a process before it died with messages in hand: time for the server to find them
    /// expired and queue them for redelivery.
    const CATCH_UP_SLACK: Duration = Duration::from_secs(1);

    /// Once, before the first fetch of a consumer that orders by key: when the durable consumer
    /// has messages delivered and not acknowledged (a process before this one died with them in
    /// hand), waits one ack wait (and [`Self::CATCH_UP_SLACK`]) before fetching. JetStream
    /// redelivers such a message only once its ack wait has passed, and until then serves a
    /// fetch the stream's newer messages: a key's later message would run before its earlier
    /// one. Once they are due, it serves the messages due for redelivery first, in the stream's
    /// order. A process that stopped cleanly left none in hand, and its successor starts at once.
    async fn catch_up(&mut self) -> Result<(), BoxError> {
        if self.catch_up == CatchUp::Unchecked {
            let in_hand = self.consumer.info().await?.num_ack_pending;
            self.catch_up = CatchUp::Done;
            if in_hand > 0 {
                let wait = self.ack_wait + Self::CATCH_UP_SLACK;
                tracing::info!(
                    in_hand,
                    ?wait,
                    "messages delivered before this consumer started are not acknowledged (a \
                     process died with them): waiting for them to be redelivered first, so \
                     that each key keeps its order"
                );
                self.catch_up = CatchUp::Until(tokio::time::Instant::now() + wait);
            }
        }
        if let CatchUp::Until(until) = self.catch_up {
            tokio::time::sleep_until(until).await;
            self.catch_up = CatchUp::Done;
        }
        Ok(())
    }

    /// How long past a pull request's own wait its answer may take before the request counts
    /// as lost: a request or its answer (the messages, or the status that ends it) can be lost
    /// with a connection that dies, and nothing else would end the wait. async-nats allows the
    /// same for a request that waits, and nothing for one that does not.
    const ANSWER_SLACK: Duration = Duration::from_secs(5);

    /// The deliveries a pull request's messages make, gathered until the request ends or until
    /// `wait` and [`Self::ANSWER_SLACK`] have passed: then what came is returned, or, if
    /// nothing did, an error (the runtime backs off and pulls again).
    async fn gather(
        &self,
        mut messages: impl futures_util::Stream<Item = Result<jetstream::Message, async_nats::Error>>
        + Unpin,
        max: usize,
        wait: Duration,
    ) -> Result<Vec<JetStreamDelivery>, BoxError> {
        let mut deliveries = Vec::with_capacity(max);
        let gathered = tokio::time::timeout(wait + Self::ANSWER_SLACK, async {
            while let Some(message) = messages.next().await {
                deliveries.push(self.delivery(message?));
            }
            Ok::<(), BoxError>(())
        })
        .await;
        match gathered {
            Ok(ended) => ended.map(|()| deliveries),
            Err(_) if !deliveries.is_empty() => Ok(deliveries),
            Err(_) => Err(format!(
                "NATS did not answer a pull request within {:?}: the connection to the server \
                 may be down (the client reconnects by itself)",
                wait + Self::ANSWER_SLACK
            )
            .into()),
        }
    }
}

impl Source for JetStreamSource {
    type Delivery = JetStreamDelivery;

    async fn fetch(&mut self, max: usize) -> Result<Vec<JetStreamDelivery>, BoxError> {
        self.catch_up().await?;
        let deliveries = self.fetch_ready(max).await?;
        if !deliveries.is_empty() {
            return Ok(deliveries);
        }
        // Nothing ready: wait for the first message, and return it as soon as it comes.
        let first = self
            .consumer
            .batch()
            .max_messages(1)
            .expires(self.fetch_wait)
            .messages()
            .await?;
        self.gather(first, 1, self.fetch_wait).await
    }

    async fn fetch_ready(&mut self, max: usize) -> Result<Vec<JetStreamDelivery>, BoxError> {
        self.catch_up().await?;
        // A no-wait pull: the server sends what it has, up to `max`, and ends the request.
        let ready = self.consumer.fetch().max_messages(max).messages().await?;
        self.gather(ready, max, Duration::ZERO).await
    }

    fn ack_wait(&self) -> Option<Duration> {
        Some(self.ack_wait)
    }

    fn redelivery_horizon(&self) -> Option<Duration> {
        self.horizon
    }

    fn order_by_key(&mut self) {
        self.catch_up = CatchUp::Unchecked;
    }
}
