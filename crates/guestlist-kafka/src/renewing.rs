//! An idempotent producer made again once it stopped for good.
//!
//! librdkafka stops an idempotent producer for good (a fatal error) when it cannot go on safely
//! (fenced for good, its sequence lost): every record it is given after that fails at once,
//! whatever the brokers do. The relay's publisher and a source's dead letters would then publish
//! nothing for the rest of the process. (A `ProducerFenced` answer that librdkafka does not
//! count as fatal, which the soak met on tansu, is not covered here yet.)

use std::sync::Mutex;

use rdkafka::ClientConfig;
use rdkafka::error::KafkaError;
use rdkafka::producer::{FutureProducer, Producer};

/// A producer, and the settings to make it again with.
pub(crate) struct Renewing {
    current: Mutex<FutureProducer>,
    config: ClientConfig,
}

impl Renewing {
    /// The producer `config` makes.
    pub(crate) fn new(config: ClientConfig) -> Result<Self, KafkaError> {
        Ok(Self {
            current: Mutex::new(config.create()?),
            config,
        })
    }

    /// The producer in use.
    pub(crate) fn current(&self) -> FutureProducer {
        self.current
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
    }

    /// After a record failed on `used`: replaces it with a new producer where it stopped for
    /// good, unless another caller replaced it already. What it failed goes again on the new one,
    /// as after an outage (a new record: the consumer's inbox drops a repeat).
    ///
    /// The stopped producer is let go on a blocking thread: dropping one waits for its threads.
    pub(crate) fn renew_if_stopped(&self, used: FutureProducer) {
        let Some((code, reason)) = used.client().fatal_error() else {
            return;
        };
        let mut current = self.current.lock().unwrap_or_else(|e| e.into_inner());
        if current.client().native_ptr() != used.client().native_ptr() {
            // Replaced already; this may be the stopped one's last handle.
            drop(current);
            tokio::task::spawn_blocking(move || drop(used));
            return;
        }
        match self.config.create() {
            Ok(renewed) => {
                tracing::warn!(
                    ?code,
                    %reason,
                    "the Kafka producer stopped for good; a new one takes over, and what it \
                     failed goes again"
                );
                let stopped = std::mem::replace(&mut *current, renewed);
                drop(current);
                tokio::task::spawn_blocking(move || drop((stopped, used)));
            }
            Err(err) => tracing::error!(
                ?code,
                %reason,
                error = %err,
                "the Kafka producer stopped for good, and a new one cannot be made; trying \
                 again after the next failure"
            ),
        }
    }
}
