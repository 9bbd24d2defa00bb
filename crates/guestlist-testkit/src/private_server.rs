//! The database servers of a test's own ([`PrivatePostgres`], [`PrivateMariadb`]) as one kind,
//! so that a story that takes its database down the hard way is written once and runs on
//! either.

use std::future::Future;
use std::time::Duration;

use crate::Fixture;
use crate::private_mariadb::PrivateMariadb;
use crate::private_postgres::PrivatePostgres;

/// A database server of one test's own, which the test takes down at once and starts again.
pub trait PrivateServer: Send + Sync + Sized + 'static {
    /// The backend it serves.
    type Db: Fixture;

    /// Makes the server's files in a temporary directory and starts it on a free port.
    fn start() -> Self;

    /// A URL of the server's test database.
    fn url(&self) -> String;

    /// Takes the server down at once: every session cut, commits in flight kept or lost,
    /// crash recovery at the next start.
    fn crash(&self);

    /// Starts the server again, on the same port, and waits until it accepts connections.
    fn start_again(&self);

    /// [`crash`](Self::crash), down for `down`, then [`start_again`](Self::start_again).
    fn restart(&self, down: Duration) -> impl Future<Output = ()> + Send {
        async move {
            self.crash();
            tokio::time::sleep(down).await;
            self.start_again();
        }
    }

    /// A pool of `max` connections whose acquire timeout is `acquire`: short, so that a part on
    /// it meets the server's absence rather than wait it out.
    fn pool(
        &self,
        max: u32,
        acquire: Duration,
    ) -> impl Future<Output = sqlx::Pool<Self::Db>> + Send {
        async move {
            let url = self.url();
            sqlx::pool::PoolOptions::<Self::Db>::new()
                .max_connections(max)
                .acquire_timeout(acquire)
                .connect(&url)
                .await
                .unwrap_or_else(|err| panic!("the private {} at {url}: {err}", Self::Db::LABEL))
        }
    }
}

impl PrivateServer for PrivatePostgres {
    type Db = sqlx::Postgres;

    fn start() -> Self {
        Self::start()
    }

    fn url(&self) -> String {
        self.url()
    }

    fn crash(&self) {
        self.stop_immediately();
    }

    fn start_again(&self) {
        self.start_again();
    }
}

impl PrivateServer for PrivateMariadb {
    type Db = sqlx::MySql;

    fn start() -> Self {
        Self::start()
    }

    fn url(&self) -> String {
        self.url()
    }

    fn crash(&self) {
        self.kill();
    }

    fn start_again(&self) {
        self.start_again();
    }
}
