//! The whole relay race, every hop real, every runner killed along the way: 2,000 orders created
//! through the warehouse's API with retried requests → the order's `OrderPaid` in the outbox, on
//! the order's own transaction → the relay → the broker → two warehouses consuming with the inbox,
//! each charging through payments with the key it carries and writing `PickTaskCreated` to the
//! outbox on the claim's transaction → the relay → the broker. The relay (twice), payments and a
//! warehouse are SIGKILLed at random moments and started again.
//!
//! At the end every order exists once, has one pick task and one charge, every event reached the
//! next hop exactly once in effect (the broker's deduplication and the inbox absorb the relay's
//! repeats), nothing is left pending in the outbox, on the broker or in a dead-letter place.

#![allow(unreachable_pub)] // a test crate has no public API

mod common;

use std::collections::HashSet;
use std::hash::{BuildHasher, RandomState};
use std::sync::Arc;
use std::time::Duration;

use guestlist::sqlx::Postgres;
use guestlist_testkit::Database;
use tokio::process::Command;
use tokio::sync::Semaphore;
use warehouse_example::broker::Orders;
use warehouse_example::warehouse::{NewOrder, Order};

use common::{
    FreshDatabase, PAYMENTS_READY, RELAY_READY, Service, WAREHOUSE_READY, amqp_url, count,
    free_address, nats_url, payments_on, pending_on_the_broker, relay, reservations_of_picks,
    until_at_least, until_the_broker_is_quiet, warehouse_on,
};

/// Orders created.
const ORDERS: i64 = 2_000;
/// Requests in flight from the shop's clients at once.
const CLIENTS: usize = 16;
/// How long a whole run may take before the test gives up.
const RUN_FOR: Duration = Duration::from_secs(240);
/// How long the broker must show nothing pending before the warehouses stop.
const QUIET: Duration = Duration::from_secs(3);

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_thousand_orders_hop_by_hop_through_crashes_on_nats() {
    let orders = Orders::new(nats_url(), format!("WH_RACE_{}", std::process::id()));
    relay_race(orders, "nats").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_thousand_orders_hop_by_hop_through_crashes_on_rabbitmq() {
    let orders = Orders::new(amqp_url(), format!("wh_race_{}", std::process::id()));
    relay_race(orders, "rabbitmq").await;
}

/// A service that keeps its address across restarts.
struct Runner {
    listen: String,
    command: Box<dyn Fn(&str) -> Command + Send + Sync>,
    ready: &'static str,
}

impl Runner {
    async fn start(&self) -> Service {
        let command = (self.command)(&self.listen);
        if self.ready == RELAY_READY {
            Service::start_without_api(command, self.ready).await
        } else {
            Service::start(command, self.ready).await
        }
    }
}

async fn relay_race(orders: Orders, broker: &str) {
    let database = FreshDatabase::create(&format!(
        "guestlist_wh_race_{broker}_{}",
        std::process::id()
    ))
    .await;
    let db = Database::<Postgres>::attach(&database.url, 2).await;
    orders.remove().await.unwrap();
    orders.declare().await.unwrap();

    let url = database.url.clone();
    let payments = Runner {
        listen: free_address(),
        command: Box::new(move |listen| {
            let mut command = payments_on(&url, listen);
            // A charge takes a moment before it commits, so that a kill lands mid-charge; the
            // lease of a charge that died is short, so that its order waits seconds, not minutes.
            command.args(["--lease", "3s", "--charge-takes", "5ms"]);
            command
        }),
        ready: PAYMENTS_READY,
    };
    let payments_url = format!("http://{}", payments.listen);
    let (url, queue) = (database.url.clone(), orders.clone());
    let warehouse = move |listen: String| {
        let (url, queue, payments_url) = (url.clone(), queue.clone(), payments_url.clone());
        Runner {
            listen,
            command: Box::new(move |listen| warehouse_on(&url, &queue, &payments_url, listen)),
            ready: WAREHOUSE_READY,
        }
    };
    let (first, second) = (warehouse(free_address()), warehouse(free_address()));
    let (url, queue) = (database.url.clone(), orders.clone());
    let relays = Runner {
        listen: String::new(),
        command: Box::new(move |_| relay(&url, &queue, "1s")),
        ready: RELAY_READY,
    };

    let mut payments_service = payments.start().await;
    let mut first_service = first.start().await;
    let second_service = second.start().await;
    let mut relay_service = relays.start().await;

    let apis = Arc::new([
        format!("http://{}", first.listen),
        format!("http://{}", second.listen),
    ]);
    let shop = tokio::spawn(create_orders(apis));

    // The kills, each at a random point of the race (counted in pick tasks).
    let random = RandomState::new();
    let at =
        |what: &str, from: i64, to: i64| from + (random.hash_one(what) as i64).abs() % (to - from);
    let picked = "SELECT count(*) FROM pick_tasks";
    let mut kills = vec![
        (at("relay-1", 100, 500), "relay"),
        (at("payments", 500, 900), "payments"),
        (at("warehouse", 900, 1300), "warehouse"),
        (at("relay-2", 1300, 1700), "relay"),
    ];
    kills.sort();
    for (when, which) in kills {
        until_at_least(&db, picked, when, RUN_FOR).await;
        eprintln!("{broker}: SIGKILL {which} at {when} pick tasks");
        match which {
            "relay" => {
                relay_service.sigkill().await;
                relay_service = relays.start().await;
            }
            "payments" => {
                payments_service.sigkill().await;
                tokio::time::sleep(Duration::from_millis(300)).await; // refused meanwhile
                payments_service = payments.start().await;
            }
            _ => {
                first_service.sigkill().await;
                first_service = first.start().await;
            }
        }
    }
    let created = shop.await.unwrap();
    until_at_least(&db, picked, ORDERS, RUN_FOR).await;
    // Every order's two messages are enqueued by now (its pick task commits with the second):
    // the relay deletes each row once the broker confirmed it, so an empty outbox is all sent.
    let sent = format!("SELECT {} - count(*) FROM warehouse_outbox", 2 * ORDERS);
    until_at_least(&db, &sent, 2 * ORDERS, RUN_FOR).await;

    // Redeliveries of what was already handled drain; then everything stops cleanly.
    until_the_broker_is_quiet(&orders, QUIET, RUN_FOR).await;
    for service in [
        first_service,
        second_service,
        relay_service,
        payments_service,
    ] {
        service.sigterm().await;
    }

    assert_eq!(
        created, ORDERS as usize,
        "every retried request got its first order back"
    );
    assert_eq!(
        count(&db, "SELECT count(*) FROM orders").await,
        ORDERS,
        "one order per key"
    );
    assert_eq!(count(&db, picked).await, ORDERS, "one pick task per order");
    assert_eq!(
        count(&db, "SELECT count(DISTINCT order_id) FROM pick_tasks").await,
        ORDERS,
        "every order picked"
    );
    assert_eq!(
        reservations_of_picks(&db).await,
        ORDERS,
        "one reservation per order"
    );
    assert_eq!(
        count(&db, "SELECT count(*) FROM charges").await,
        ORDERS,
        "one charge per order, though payments died mid-race"
    );
    assert_eq!(
        count(
            &db,
            "SELECT count(DISTINCT p.charge) FROM pick_tasks p \
             JOIN charges c ON p.charge = 'ch_' || c.id AND c.order_id = p.order_id"
        )
        .await,
        ORDERS,
        "every pick task records its own order's charge, each charge once"
    );
    assert_eq!(
        count(&db, "SELECT count(*) FROM warehouse_outbox").await,
        0,
        "nothing left pending"
    );
    let picks = orders.picks_published().await.unwrap();
    let distinct: HashSet<&String> = picks.iter().collect();
    assert_eq!(
        distinct.len() as i64,
        ORDERS,
        "{broker}: every PickTaskCreated reached the next hop"
    );
    assert!(
        distinct
            .iter()
            .all(|id| id.starts_with("evt_pick_evt_order_")),
        "{broker}: each announces a pick of an OrderPaid from the outbox"
    );
    assert_eq!(pending_on_the_broker(&orders).await, Vec::<String>::new());
    eprintln!(
        "{broker}: {} PickTaskCreated on the broker for {ORDERS} orders",
        picks.len()
    );
    orders.remove().await.unwrap();
}

/// Creates every order through the warehouses' API, each request sent twice with the same key
/// (the shop's client retrying) and retried on either warehouse while a kill makes it fail.
/// Returns how many distinct orders the responses named.
async fn create_orders(apis: Arc<[String; 2]>) -> usize {
    let client = reqwest::Client::new();
    let slots = Arc::new(Semaphore::new(CLIENTS));
    let mut tasks = Vec::new();
    for n in 1..=ORDERS {
        let permit = Arc::clone(&slots).acquire_owned().await.unwrap();
        let (client, apis) = (client.clone(), Arc::clone(&apis));
        tasks.push(tokio::spawn(async move {
            let _permit = permit;
            let key = format!("order-{n}");
            let first = create(&client, &apis, &key, n).await;
            let again = create(&client, &apis, &key, n).await;
            assert_eq!(first, again, "{key}: the retry answers with the same order");
            first
        }));
    }
    let mut ids = HashSet::new();
    for task in tasks {
        ids.insert(task.await.unwrap());
    }
    ids.len()
}

/// `POST /orders` with `key` until a warehouse answers 201 (a first answer or its replay).
async fn create(client: &reqwest::Client, apis: &[String; 2], key: &str, n: i64) -> i64 {
    let deadline = tokio::time::Instant::now() + RUN_FOR;
    for attempt in 0usize.. {
        let api = &apis[(n as usize + attempt) % 2];
        let sent = client
            .post(format!("{api}/orders"))
            .header("Idempotency-Key", key)
            .header("Authorization", "Bearer shop")
            .json(&NewOrder {
                amount: 1_000 + n,
                customer: None,
            })
            .send()
            .await;
        if let Ok(answer) = sent
            && answer.status() == 201
        {
            return answer.json::<Order>().await.unwrap().id;
        }
        // Refused (a warehouse restarting), 409 (the first attempt still in flight), 503.
        assert!(
            tokio::time::Instant::now() < deadline,
            "{key}: no warehouse took it"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    unreachable!()
}
