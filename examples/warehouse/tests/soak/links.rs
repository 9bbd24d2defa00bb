//! The links between the parts and what they talk to, each through a fault proxy (cut, stalled,
//! slowed), and the PostgreSQL server of the run's own (stopped the hard way and started again).

use std::time::Duration;

use guestlist_testkit::fault_proxy::FaultProxy;
use guestlist_testkit::own_tansu::OwnTansu;
use guestlist_testkit::private_postgres::PrivatePostgres;
use tokio::sync::Mutex;
use warehouse_example::broker::{Kind, Orders};

/// A link the nemesis can cut, stall or slow.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Link {
    /// Every part to PostgreSQL.
    Database,
    /// The warehouses and the relays to the broker.
    Broker,
    /// The warehouses to payments.
    Payments,
}

impl Link {
    pub const ALL: [Link; 3] = [Link::Database, Link::Broker, Link::Payments];

    pub fn name(self) -> &'static str {
        match self {
            Link::Database => "database link",
            Link::Broker => "broker link",
            Link::Payments => "payments link",
        }
    }
}

/// The run's PostgreSQL and the three proxies.
pub struct Links {
    pub postgres: PrivatePostgres,
    database: FaultProxy,
    broker: FaultProxy,
    payments: FaultProxy,
    /// The database's URL through its proxy, for the parts.
    pub database_url: String,
    /// The broker, through its proxy, for the parts.
    pub orders: Orders,
    /// Held by a fault on a link (or the server behind it): one at a time per link.
    faults: [Mutex<()>; 3],
    /// On Kafka, the run's own broker, which knows its proxy's address as its own (a Kafka
    /// client goes to the address the broker advertises, and would go around the proxy).
    _kafka: Option<OwnTansu>,
}

impl Links {
    /// A PostgreSQL of the run's own and a proxy to it, to the broker of `orders` (on Kafka,
    /// a broker of the run's own), and to payments at `payments` (`host:port`, where it will
    /// listen).
    pub async fn start(orders: &Orders, payments: &str) -> Self {
        let postgres = tokio::task::spawn_blocking(PrivatePostgres::start)
            .await
            .expect("a PostgreSQL of the run's own");
        let (database, database_url) = FaultProxy::for_url(&postgres.url()).await;
        let (broker, broker_url, kafka) = if orders.kind() == Kind::Kafka {
            let (tansu, broker) = OwnTansu::behind_proxy().await;
            let url = format!("kafka://{}", broker.addr());
            (broker, url, Some(tansu))
        } else {
            let (broker, url) = FaultProxy::for_url(&orders.url).await;
            (broker, url, None)
        };
        let payments = FaultProxy::to(payments).await;
        Self {
            postgres,
            database,
            broker,
            payments,
            database_url,
            orders: Orders::new(broker_url, orders.name.clone()),
            faults: Default::default(),
            _kafka: kafka,
        }
    }

    /// Payments' URL through its proxy, for the warehouses.
    pub fn payments_url(&self) -> String {
        format!("http://{}", self.payments.addr())
    }

    fn proxy(&self, link: Link) -> &FaultProxy {
        match link {
            Link::Database => &self.database,
            Link::Broker => &self.broker,
            Link::Payments => &self.payments,
        }
    }

    fn lock(&self, link: Link) -> &Mutex<()> {
        &self.faults[Link::ALL.iter().position(|l| *l == link).unwrap_or(0)]
    }

    /// Cuts every connection of `link` and refuses new ones for `down`.
    pub async fn cut(&self, link: Link, down: Duration) {
        let _fault = self.lock(link).lock().await;
        self.proxy(link).cut();
        tokio::time::sleep(down).await;
        self.proxy(link).mend();
    }

    /// Holds every byte on `link` for `held`.
    pub async fn stall(&self, link: Link, held: Duration) {
        let _fault = self.lock(link).lock().await;
        self.proxy(link).stall();
        tokio::time::sleep(held).await;
        self.proxy(link).release();
    }

    /// Delays each answer on `link` by `delay`, for `lasting`.
    pub async fn slow(&self, link: Link, delay: Duration, lasting: Duration) {
        let _fault = self.lock(link).lock().await;
        self.proxy(link).delay(delay);
        tokio::time::sleep(lasting).await;
        self.proxy(link).delay(Duration::ZERO);
    }

    /// Stops PostgreSQL with `-m immediate` and starts it again after `down`.
    pub async fn restart_postgres(&self, down: Duration) {
        let _fault = self.lock(Link::Database).lock().await;
        // Blocking calls of `pg_ctl`: on a thread meant for them, the server borrowed there.
        tokio::task::block_in_place(|| self.postgres.stop_immediately());
        tokio::time::sleep(down).await;
        tokio::task::block_in_place(|| self.postgres.start_again());
    }
}
