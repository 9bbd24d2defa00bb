//! The OrderPaid handler, in three named steps that a redelivery resumes after: **charge**
//! (payments, over HTTP, with the key it carries), **reserve** (the order's stock, in the
//! database, exactly once), then **ship**: the pick task that records the charge and its
//! `PickTaskCreated` in the outbox, on the transaction that claims the event.

use std::marker::PhantomData;
use std::time::Duration;

use guestlist::consumer::{Message, StepHandler};
use guestlist::inbox::Steps;
use guestlist::outbox::OrderingKey;
use guestlist::{MessageId, Outgoing, Topic};
use reqwest_middleware::ClientWithMiddleware;
use serde::Deserialize;

use crate::db::Shop;
use crate::payments::{Charge, ChargeRequest};
use crate::warehouse::{PickTaskCreated, outbox};

/// Set in the environment to make the handler hang after payments answered the charge and
/// before the charge is journaled, so that a test (or the demo) can kill it there.
pub const HANG_AFTER_CHARGE: &str = "WAREHOUSE_HANG_AFTER_CHARGE";
/// What the handler prints before it hangs.
pub const CHARGED: &str = "CHARGED, NOT COMMITTED";

/// What the handler reads of an OrderPaid body.
#[derive(Deserialize)]
struct Payment {
    order: i64,
    amount: i64,
    #[serde(default)]
    customer: Option<String>,
}

/// How long a call to payments may take before the step gives up on its answer: the charge
/// then runs again later, under the same key, and payments answers it once.
const PAYMENTS_TIMEOUT: Duration = Duration::from_secs(10);

/// A client whose mutating calls carry the key of the step in progress
/// (`warehouse:<event id>/charge`). A call with no answer within 10 s is a
/// "not yet" (the key carried makes asking again safe), never a lane held for good by a link
/// that went silent.
pub fn payments_client() -> ClientWithMiddleware {
    let client = reqwest::Client::builder()
        .connect_timeout(Duration::from_secs(2))
        .timeout(PAYMENTS_TIMEOUT)
        .build()
        .expect("a reqwest client with timeouts");
    reqwest_middleware::ClientBuilder::new(client)
        .with(guestlist::carry::CarryKey::new())
        .build()
}

/// The warehouse's handler of `OrderPaid`, on database `DB`.
///
/// A crash after the charge and before its journal charges again with the same key (payments
/// replays the same charge); a crash after the journal resumes at **reserve**, and payments is
/// not called again; a reservation is never made twice, since its rows commit with its
/// journal.
pub struct Picking<DB> {
    payments: String,
    client: ClientWithMiddleware,
    picks: Topic,
    db: PhantomData<fn() -> DB>,
}

impl<DB> Picking<DB> {
    /// Charges through the payments service at `payments`, announces each pick on `picks`.
    pub fn new(payments: String, picks: Topic) -> Self {
        Self {
            payments,
            client: payments_client(),
            picks,
            db: PhantomData,
        }
    }

    /// The charge: `POST /v1/charges`, its Idempotency-Key carried from the step.
    async fn charge(&self, event: &Payment) -> anyhow::Result<Charge> {
        let charge: Charge = self
            .client
            .post(format!("{}/v1/charges", self.payments))
            .header("authorization", "Bearer warehouse")
            .json(&ChargeRequest {
                order: event.order,
                amount: event.amount,
            })
            .send()
            .await?
            .error_for_status()?
            .json()
            .await?;
        if std::env::var_os(HANG_AFTER_CHARGE).is_some() {
            println!("{CHARGED} {}", charge.id);
            std::future::pending::<()>().await;
        }
        Ok(charge)
    }
}

/// What the steps hand to the final work: the event as read, and its charge.
pub struct Charged {
    event: Payment,
    charge: Charge,
}

impl<DB: Shop> StepHandler<DB> for Picking<DB> {
    type Error = anyhow::Error;
    type Done = Charged;

    async fn steps(&self, steps: &mut Steps<DB>, message: &Message) -> anyhow::Result<Charged> {
        // The event's id is `message.id`, wherever the publisher put it: read only the rest.
        let event: Payment = serde_json::from_slice(&message.payload)?;
        let charge = steps.external("charge", || self.charge(&event)).await?;
        let (order, id) = (event.order, message.id.as_str());
        steps
            .database("reserve", async |tx| DB::reserve(tx, order, id).await)
            .await?;
        Ok(Charged { event, charge })
    }

    async fn finish(
        &self,
        tx: &mut DB::Connection,
        message: &Message,
        Charged { event, charge }: Charged,
    ) -> anyhow::Result<()> {
        DB::set_picking(tx, event.order).await?;
        DB::add_pick_task(tx, event.order, message.id.as_str(), &charge.id).await?;
        if let Some(customer) = &event.customer {
            DB::record_arrival(tx, customer, event.order, &arrival(message)).await?;
        }
        // The next hop's event commits with the pick task, or not at all.
        let created = PickTaskCreated {
            id: format!("evt_pick_{}", message.id),
            order: event.order,
            charge: charge.id,
        };
        let next = Outgoing::new(self.picks.clone(), serde_json::to_vec(&created)?)
            .id(MessageId::new(&created.id)?)
            .ordering_key(OrderingKey::new(format!("order-{}", event.order))?);
        outbox::<DB>().enqueue(tx, &next).await?;
        Ok(())
    }
}

/// How an event arrived: which process, when, which delivery, under which broker key.
fn arrival(message: &Message) -> String {
    let at = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap_or_default();
    // Where the broker kept it, where it tells: which hop put two orders out of order.
    let kept = message
        .delivery::<guestlist::kafka::KafkaDelivery>()
        .map(|kafka| {
            format!(
                ", partition {} offset {}",
                kafka.partition(),
                kafka.offset()
            )
        })
        .unwrap_or_default();
    format!(
        "by pid {} at {:.3}, delivery {}, key {:?}{kept}",
        std::process::id(),
        at.as_secs_f64(),
        message.delivery_count,
        message.key
    )
}
