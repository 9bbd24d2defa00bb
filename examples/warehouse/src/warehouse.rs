//! `warehouse`: consumes `OrderPaid`, picks, charges with the key it carries, and announces the
//! pick task through its outbox; and its own API creates paid orders behind the Idempotency-Key
//! layer, each order's `OrderPaid` written to the outbox on the order's own transaction.

use std::time::Duration;

use axum::Router;
use axum::extract::{Json, State};
use axum::http::StatusCode;
use axum::response::IntoResponse;
use axum::routing::post;
use guestlist::consumer::{Consumer, IdFrom, Message, Source};
use guestlist::http::{IdempotencyLayer, IdempotentTx};
use guestlist::sqlx::Pool;
use guestlist::{
    HandlerName, Inbox, MessageId, Outbox, Outgoing, SqlKeyStore, Topic, outbox::OrderingKey,
};
use reqwest_middleware::ClientWithMiddleware;
use serde::{Deserialize, Serialize};

use crate::broker::Orders;
use crate::db::Shop;
use crate::payments::{Charge, ChargeRequest};
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

/// What the handler reads of an OrderPaid body.
#[derive(Deserialize)]
struct Payment {
    order: i64,
    amount: i64,
    #[serde(default)]
    customer: Option<String>,
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

/// Set in the environment to make the handler hang after it charges and before its commit, so
/// that a test (or the demo) can kill it there.
pub const HANG_AFTER_CHARGE: &str = "WAREHOUSE_HANG_AFTER_CHARGE";
/// What the handler prints before it hangs.
pub const CHARGED: &str = "CHARGED, NOT COMMITTED";

/// A client whose mutating calls carry the key of the work in progress.
pub fn payments_client() -> ClientWithMiddleware {
    reqwest_middleware::ClientBuilder::new(reqwest::Client::new())
        .with(guestlist::carry::CarryKey::new())
        .build()
}

/// The OrderPaid handler: PICKING, a charge with the carried key, a pick task that records it,
/// and `PickTaskCreated` in the outbox, all on the transaction of the event's claim.
pub async fn on_order_paid<DB: Shop>(
    tx: &mut DB::Connection,
    message: &Message,
    payments: &str,
    client: &ClientWithMiddleware,
    picks: &Topic,
) -> anyhow::Result<()> {
    // The event's id is `message.id`, wherever the publisher put it: read only the rest.
    let event: Payment = serde_json::from_slice(&message.payload)?;
    DB::set_picking(tx, event.order).await?;
    // The key is warehouse:<event id>/charge: the same on every redelivery of this event.
    let charge: Charge = client
        .post(format!("{payments}/v1/charges"))
        .header("authorization", "Bearer warehouse")
        .json(&ChargeRequest {
            order: event.order,
            amount: event.amount,
        })
        .with_extension(guestlist::carry::Step("charge".into()))
        .send()
        .await?
        .error_for_status()?
        .json()
        .await?;
    if std::env::var_os(HANG_AFTER_CHARGE).is_some() {
        println!("{CHARGED} {}", charge.id);
        std::future::pending::<()>().await;
    }
    DB::add_pick_task(tx, event.order, message.id.as_str(), &charge.id).await?;
    if let Some(customer) = &event.customer {
        let at = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap_or_default();
        let how = format!(
            "by pid {} at {:.3}, delivery {}, key {:?}",
            std::process::id(),
            at.as_secs_f64(),
            message.delivery_count,
            message.key
        );
        DB::record_arrival(tx, customer, event.order, &how).await?;
    }
    // The next hop's event commits with the pick task, or not at all.
    let created = PickTaskCreated {
        id: format!("evt_pick_{}", message.id),
        order: event.order,
        charge: charge.id,
    };
    let next = Outgoing::new(picks.clone(), serde_json::to_vec(&created)?)
        .id(MessageId::new(&created.id)?)
        .ordering_key(OrderingKey::new(format!("order-{}", event.order))?);
    outbox::<DB>().enqueue(tx, &next).await?;
    Ok(())
}

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

/// Consumes `source` until `shutdown`, with the inbox on `pool` (after [`migrate`]); `readiness`
/// watches the consumer's health, so that `/readyz` says when its database is down.
pub async fn consume<S: Source, DB: Shop>(
    source: S,
    pool: Pool<DB>,
    payments: String,
    topics: Topics,
    readiness: &Readiness,
    shutdown: impl std::future::Future<Output = ()> + Send,
) -> anyhow::Result<()> {
    let inbox = Inbox::<DB>::with_table(INBOX)?;
    let client = payments_client();
    let consumer = Consumer::new(
        source,
        pool,
        inbox,
        HandlerName::new("warehouse")?,
        id_from(),
        async move |tx: &mut DB::Connection, message: &Message| {
            on_order_paid::<DB>(tx, message, &payments, &client, &topics.picks).await
        },
    )
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
