//! The database goes away under the relay the hard way and comes back: every message goes out,
//! each key's in commit order, and the relay resumes by itself.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use guestlist_sqlx::Relay;

use super::line::Line;
use crate::brokers::Broker;
use crate::private_server::PrivateServer;
use crate::run_until_stopped;

/// The outbox's database (a server of the test's own: PostgreSQL stopped with `pg_ctl stop -m
/// immediate`, MariaDB killed with SIGKILL) is taken down the hard way and started again while
/// four writers commit messages on ten keys and a relay publishes them; a writer waits for the
/// database, or tries again where its commit failed. Every message reaches the broker, each
/// key's in commit order, and the relay, which never stopped, drains the table by itself.
pub async fn a_database_restarted_mid_stream_costs_no_message_and_no_order<
    B: Broker,
    S: PrivateServer,
>(
    name: &str,
) {
    const MESSAGES: usize = 400;
    const WRITERS: usize = 4;
    const KEYS: usize = 10;
    let cluster = S::start();
    let line = Arc::new(Line::<B, S::Db>::open_at(name, &cluster.url()).await);
    // A short acquire timeout, so that the relay meets the absence rather than wait it out.
    let pool = cluster.pool(4, Duration::from_secs(1)).await;
    let relay = Relay::new(line.outbox.clone(), pool, line.rig.broker.publisher().await)
        .lease(Duration::from_secs(2))
        .poll(Duration::from_millis(20))
        .batch(50);
    let (stop, task) = run_until_stopped!(relay);

    let enqueued = Arc::new(AtomicUsize::new(0));
    let writers: Vec<_> = (0..WRITERS)
        .map(|writer| {
            let (line, enqueued) = (Arc::clone(&line), Arc::clone(&enqueued));
            tokio::spawn(async move {
                let mut failures = 0;
                for n in (writer..MESSAGES).step_by(WRITERS) {
                    let key = format!("order-{}", n % KEYS);
                    failures += line.enqueue_until_in(&format!("evt_{n}"), &key).await;
                    enqueued.fetch_add(1, Ordering::SeqCst);
                    tokio::time::sleep(Duration::from_millis(15)).await;
                }
                failures
            })
        })
        .collect();
    // The restart lands a quarter of the way into the writing, whatever the relay has
    // published by then (a slow broker, moto under load, may have published little).
    line.rig
        .until(
            Duration::from_secs(60),
            "the first messages are enqueued",
            || async { enqueued.load(Ordering::SeqCst) >= 100 },
        )
        .await;
    assert!(
        writers.iter().all(|writer| !writer.is_finished()),
        "the restart lands while the writers write"
    );
    cluster.restart(Duration::from_secs(1)).await;

    let mut failures = 0;
    for writer in writers {
        failures += writer.await.unwrap();
    }
    let started = Instant::now();
    while line.pending().await > 0 {
        assert!(
            started.elapsed() < Duration::from_secs(120),
            "{}: the relay drains the table once the database is back",
            B::LABEL
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert!(!task.is_finished(), "{}: the relay never stopped", B::LABEL);
    stop.send(()).unwrap();
    tokio::time::timeout(Duration::from_secs(60), task)
        .await
        .unwrap_or_else(|_| panic!("{}: the relay stops within a minute of asked", B::LABEL))
        .unwrap()
        .unwrap_or_else(|err| panic!("{}: the relay's run ended in {err}", B::LABEL));
    // Writers retried commits whose answer was lost: see the assertion.
    let received = line
        .assert_received_in_rising_key_order(MESSAGES, KEYS)
        .await;
    eprintln!(
        "{}: {received} messages on the broker for {MESSAGES} ({} repeats), {failures} failed \
         commits retried",
        B::LABEL,
        received - MESSAGES
    );
}
