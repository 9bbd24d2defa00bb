//! `warehouse`: consumes `OrderPaid` through [`Picking`]'s steps (charge, reserve, ship), and
//! announces each pick task through its outbox; and its own API creates paid orders behind the Idempotency-Key
//! layer, each order's `OrderPaid` written to the outbox on the order's own transaction.

use std::time::Duration;

use axum::Router;
use axum::extract::{Json, State};
use axum::http::StatusCode;
use axum::response::IntoResponse;
use axum::routing::post;
use guestlist::consumer::{Consumer, IdFrom, KeyFrom, Source};
use guestlist::http::{IdempotencyLayer, IdempotentTx};
use guestlist::sqlx::Pool;
use guestlist::{
    HandlerName, Inbox, MessageId, Outbox, Outgoing, SqlKeyStore, Topic, outbox::OrderingKey,
};
use serde::{Deserialize, Serialize};

use crate::broker::Orders;
use crate::db::Shop;
use crate::picking::Picking;
use crate::ready::Readiness;

/// The event the warehouse consumes: `{"id": "evt_9f3k", "order": 1, "amount": 1200}`.
#[derive(Debug, Serialize, Deserialize)]
pub struct OrderPaid {
    /// The event's id (`evt_9f3k`): the inbox's message id. A publisher may leave it out and
    /// give the broker the id instead (AMQP `message_id`, `Nats-Msg-Id`); see [`id_from`].
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub id: Option<String>,
    /// The order paid.
    pub order: i64,
    /// In cents.
    pub amount: i64,
    /// Whose order it is, if the shop said: a customer's orders reach the warehouse in the
    /// order they were placed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub customer: Option<String>,
}

/// The event the warehouse publishes once it has picked and charged an order:
/// `{"id": "evt_pick_evt_9f3k", "order": 1, "charge": "ch_1"}`.
#[derive(Debug, Serialize, Deserialize)]
pub struct PickTaskCreated {
    /// `evt_pick_` and the OrderPaid event's id: the same however often that event arrives.
    pub id: String,
    /// The order picked.
    pub order: i64,
    /// The charge that paid for it.
    pub charge: String,
}

/// Where the warehouse's outbox sends each kind of event.
#[derive(Debug, Clone)]
pub struct Topics {
    /// `OrderPaid`, from `POST /orders`.
    pub paid: Topic,
    /// `PickTaskCreated`, from the OrderPaid handler.
    pub picks: Topic,
}

impl Topics {
    /// The topics of the stream or queue `orders`.
    pub fn of(orders: &Orders) -> anyhow::Result<Self> {
        Ok(Self {
            paid: Topic::new(orders.paid_topic())?,
            picks: Topic::new(orders.picks())?,
        })
    }
}

/// Where the warehouse reads an event's id: the payload's `id`, or else the id the publisher
/// gave the broker, so that an ordinary client in any language can publish with either.
pub fn id_from() -> IdFrom {
    IdFrom::first_of([IdFrom::JsonField("/id".into()), IdFrom::BrokerId])
}

/// The inbox of the OrderPaid handler.
const INBOX: &str = "warehouse_inbox";
/// The warehouse's outgoing events, published by the `relay` binary.
const OUTBOX: &str = "warehouse_outbox";

/// The warehouse's outbox: `OrderPaid` from `POST /orders`, `PickTaskCreated` from the
/// handler, each written on the transaction of the work it announces.
pub fn outbox<DB: Shop>() -> Outbox<DB> {
    Outbox::with_table(OUTBOX).expect("a valid table name")
}
/// The stored responses of `POST /orders`.
const KEYS: &str = "warehouse_keys";

/// Creates the warehouse's tables where missing: the example's own, the inbox, the key table
/// and the outbox. Instances that start at once take turns.
pub async fn migrate<DB: Shop>(pool: &Pool<DB>) -> anyhow::Result<()> {
    DB::create_tables(pool).await?;
    Inbox::<DB>::with_table(INBOX)?.migrate(pool).await?;
    outbox::<DB>().migrate(pool).await?;
    SqlKeyStore::with_table(pool.clone(), KEYS)?
        .migrate()
        .await?;
    Ok(())
}

/// How the warehouse's consumer runs.
#[derive(Debug, Clone, Copy)]
pub struct Tuning {
    /// How long a run of an event's steps holds the event before another warehouse may take
    /// it over: what a warehouse that died mid-steps delays its events by.
    pub step_lease: Duration,
    /// Deliveries after which an event never handled is dead-lettered (deferrals, such as
    /// another warehouse holding the event's steps, do not count).
    pub max_deliveries: u32,
    /// How many customers' events are handled at once, each customer's in the order placed
    /// (see [`Orders::keys`]).
    pub concurrency: usize,
}

impl Default for Tuning {
    fn default() -> Self {
        Self {
            step_lease: Duration::from_secs(30),
            max_deliveries: 5,
            concurrency: 1,
        }
    }
}

/// Consumes `source` until `shutdown`, with the inbox on `pool` (after [`migrate`]), each
/// event through [`Picking`]'s steps, the events of different `keys` at once; `readiness` watches the consumer's health, so that
/// `/readyz` says when its database is down.
pub async fn consume<S: Source, DB: Shop>(
    source: S,
    keys: KeyFrom,
    pool: Pool<DB>,
    picking: Picking<DB>,
    tuning: Tuning,
    readiness: &Readiness,
    shutdown: impl std::future::Future<Output = ()> + Send,
) -> anyhow::Result<()> {
    let inbox = Inbox::<DB>::with_table(INBOX)?.step_lease(tuning.step_lease);
    let consumer = Consumer::with_steps(
        source,
        pool,
        inbox,
        HandlerName::new("warehouse")?,
        id_from(),
        picking,
    )
    .keys(keys)
    .concurrency(tuning.concurrency)
    .max_deliveries(tuning.max_deliveries)
    .handler_timeout(Duration::from_secs(600));
    readiness.watch(consumer.health());
    consumer.run(shutdown).await?;
    Ok(())
}

/// An order to create.
#[derive(Debug, Serialize, Deserialize)]
pub struct NewOrder {
    /// In cents.
    pub amount: i64,
    /// Whose order it is (1 to 64 printable ASCII characters, spaces included): each
    /// customer's `OrderPaid` events share an ordering key, so that the warehouse handles
    /// them in the order they were placed. Without it, each order is a key of its own.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub customer: Option<String>,
}

/// An order created.
#[derive(Debug, Serialize, Deserialize)]
pub struct Order {
    /// The order's id.
    pub id: i64,
}

/// A paid order and its `OrderPaid` in the outbox, on the transaction that also stores the
/// response under the request's Idempotency-Key: a retried request gets the same order back
/// and enqueues nothing.
async fn create_order<DB: Shop>(
    State(topics): State<Topics>,
    mut tx: IdempotentTx<DB>,
    Json(order): Json<NewOrder>,
) -> impl IntoResponse {
    let key = match &order.customer {
        Some(customer) => OrderingKey::new(format!("customer-{customer}"))
            .ok()
            .filter(|_| (1..=64).contains(&customer.len())),
        None => None,
    };
    if order.customer.is_some() && key.is_none() {
        let why = "customer: 1 to 64 printable ASCII characters (spaces included, no accents or \
                   control characters)";
        return (StatusCode::UNPROCESSABLE_ENTITY, why.to_owned()).into_response();
    }
    let created = async {
        let id = DB::insert_order(&mut tx, order.amount).await?;
        let paid = OrderPaid {
            id: Some(format!("evt_order_{id}_paid")),
            order: id,
            amount: order.amount,
            customer: order.customer.clone(),
        };
        let key = match key {
            Some(key) => key,
            None => OrderingKey::new(format!("order-{id}"))?,
        };
        let message = Outgoing::new(topics.paid.clone(), serde_json::to_vec(&paid)?)
            .id(MessageId::new(format!("evt_order_{id}_paid"))?)
            .ordering_key(key);
        outbox::<DB>().enqueue(&mut tx, &message).await?;
        Ok::<_, anyhow::Error>(id)
    };
    match created.await {
        Ok(id) => (StatusCode::CREATED, Json(Order { id })).into_response(),
        Err(err) => (StatusCode::SERVICE_UNAVAILABLE, err.to_string()).into_response(),
    }
}

/// The warehouse's public API: `POST /orders` with an `Idempotency-Key`, each order's
/// `OrderPaid` for `topics` (after [`migrate`]).
pub fn api<DB: Shop>(pool: Pool<DB>, topics: Topics) -> anyhow::Result<Router> {
    let keys = SqlKeyStore::with_table(pool, KEYS)?;
    Ok(Router::new()
        .route("/orders", post(create_order::<DB>))
        .layer(IdempotencyLayer::transactional(keys))
        .with_state(topics))
}
