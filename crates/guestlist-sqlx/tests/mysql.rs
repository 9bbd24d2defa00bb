//! The inbox suite on MariaDB/MySQL, over a real connection.

mod common;

inbox_suite!(guestlist_sqlx::sqlx::MySql);
outbox_suite!(guestlist_sqlx::sqlx::MySql);
wire_faults_suite!(guestlist_sqlx::sqlx::MySql);

/// The database killed (SIGKILL, a MariaDB of the test's own) and started again under four
/// writers.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_database_restarted_under_four_writers_loses_and_doubles_nothing() {
    use guestlist_testkit::private_mariadb::PrivateMariadb;
    use guestlist_testkit::private_server::PrivateServer;
    let server = PrivateMariadb::start();
    common::faults::a_database_restarted_under_four_writers_loses_and_doubles_nothing::<
        guestlist_sqlx::sqlx::MySql,
    >("my_restarted", &server.url(), async || {
        server.restart(std::time::Duration::from_millis(500)).await
    })
    .await;
}
