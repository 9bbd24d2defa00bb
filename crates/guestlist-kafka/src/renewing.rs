//! An idempotent producer made again once it stopped for good, or once the brokers fenced it.
//!
//! librdkafka stops an idempotent producer for good (a fatal error) when it cannot go on safely
//! (fenced for good, its sequence lost): every record it is given after that fails at once,
//! whatever the brokers do. And a producer whose records timed out (a broker stalled past
//! `message.timeout.ms`) bumps its own epoch; a broker that takes no new epoch from a producer
//! without a transactional id (tansu) then answers `ProducerFenced` to every record, and
//! librdkafka bumps again without end, never raising a fatal error. Either way the relay's
//! publisher and a source's dead letters would publish nothing for the rest of the process. A
//! new producer asks the brokers for a new producer id, at epoch 0.

use std::sync::Mutex;

use rdkafka::ClientConfig;
use rdkafka::error::{KafkaError, RDKafkaErrorCode};
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

    /// After records failed on `used` with `errors`: replaces it with a new producer where it
    /// stopped for good or one of them is a fence ([`is_fence`]), unless another caller
    /// replaced it already. What it failed goes again on the new one, as after an outage (a new
    /// record: the consumer's inbox drops a repeat).
    ///
    /// The stopped producer is let go on a blocking thread: dropping one waits for its threads.
    pub(crate) fn renew_if_stopped<'a>(
        &self,
        used: FutureProducer,
        errors: impl IntoIterator<Item = &'a KafkaError>,
    ) {
        let (code, reason) = match used.client().fatal_error() {
            Some((code, reason)) => (code, reason),
            None => match errors
                .into_iter()
                .find(|err| is_fence(err))
                .and_then(KafkaError::rdkafka_error_code)
            {
                Some(code) => (code, "the brokers fenced its epoch".to_owned()),
                None => return,
            },
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
                    "the Kafka producer stopped for good or was fenced; a new one takes over, \
                     and what it failed goes again"
                );
                let stopped = std::mem::replace(&mut *current, renewed);
                drop(current);
                tokio::task::spawn_blocking(move || drop((stopped, used)));
            }
            Err(err) => tracing::error!(
                ?code,
                %reason,
                error = %err,
                "the Kafka producer stopped for good or was fenced, and a new one cannot be \
                 made; trying again after the next failure"
            ),
        }
    }
}

/// Whether `err` is the brokers fencing the producer's epoch (`ProducerFenced`, or
/// `InvalidProducerEpoch` from brokers that name it so): a producer without a transactional id
/// never gets past it by itself.
pub(crate) fn is_fence(err: &KafkaError) -> bool {
    matches!(
        err.rdkafka_error_code(),
        Some(RDKafkaErrorCode::ProducerFenced | RDKafkaErrorCode::InvalidProducerEpoch)
    )
}
