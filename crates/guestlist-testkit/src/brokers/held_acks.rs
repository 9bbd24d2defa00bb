//! A source whose batch acknowledgements never leave: a consumer on it commits a batch of
//! several messages and hangs where it would acknowledge them, to be killed there. (A batch of
//! one, as the first fetch may bring, is acknowledged as usual.)

use std::time::Duration;

use guestlist_consumer::{BoxError, Delivery, Source};

/// `S`, with its batches' acknowledgements held forever.
pub struct HeldAcks<S>(pub S);

/// A delivery whose acknowledgement never leaves.
pub struct Held<D>(D);

impl<S: Source> Source for HeldAcks<S> {
    type Delivery = Held<S::Delivery>;

    async fn fetch(&mut self, max: usize) -> Result<Vec<Held<S::Delivery>>, BoxError> {
        Ok(self.0.fetch(max).await?.into_iter().map(Held).collect())
    }

    async fn fetch_ready(&mut self, max: usize) -> Result<Vec<Held<S::Delivery>>, BoxError> {
        Ok(self
            .0
            .fetch_ready(max)
            .await?
            .into_iter()
            .map(Held)
            .collect())
    }

    fn ack_wait(&self) -> Option<Duration> {
        self.0.ack_wait()
    }

    fn redelivery_horizon(&self) -> Option<Duration> {
        self.0.redelivery_horizon()
    }

    fn max_deliveries(&self) -> Option<u32> {
        self.0.max_deliveries()
    }
}

/// Never returns: the consumer stays between its commit and its acknowledgements.
async fn hang() -> Result<(), BoxError> {
    std::future::pending().await
}

impl<D: Delivery> Delivery for Held<D> {
    fn payload(&self) -> &[u8] {
        self.0.payload()
    }

    fn header(&self, name: &str) -> Option<&str> {
        self.0.header(name)
    }

    fn broker_id(&self) -> Option<&str> {
        self.0.broker_id()
    }

    fn delivery_count(&self) -> u32 {
        self.0.delivery_count()
    }

    async fn ack(&self) -> Result<(), BoxError> {
        self.0.ack().await
    }

    async fn ack_all(deliveries: &[&Self]) -> Result<(), BoxError> {
        let _ = deliveries;
        hang().await
    }

    async fn nak(&self, delay: Duration) -> Result<(), BoxError> {
        self.0.nak(delay).await
    }

    async fn dead_letter(&self, reason: &str) -> Result<(), BoxError> {
        self.0.dead_letter(reason).await
    }

    fn withdrawn(&self) -> bool {
        self.0.withdrawn()
    }

    async fn keep_alive(&self) -> Result<(), BoxError> {
        self.0.keep_alive().await
    }
}
