//! The outbox relay to NATS JetStream, from PostgreSQL, SQLite and MariaDB/MySQL. Module names
//! start with two letters no other broker suite's test module uses: they name streams and tables.

mod common;

guestlist_testkit::relay_suite!(jpg, common::Nats, sqlx::Postgres);
guestlist_testkit::relay_suite!(jlite, common::Nats, sqlx::Sqlite);
guestlist_testkit::relay_suite!(jmy, common::Nats, sqlx::MySql);
guestlist_testkit::relay_wire_suite!(jwire, common::Nats);
guestlist_testkit::relay_shares_suite!(jshpg, common::Nats, sqlx::Postgres);
guestlist_testkit::relay_shares_suite!(jhmy, common::Nats, sqlx::MySql);

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn wake_on_commit() {
    guestlist_testkit::brokers::relay::a_commit_wakes_an_idle_relay::<common::Nats>(
        "wake_on_commit",
    )
    .await;
}

/// A NATS server of the test's own, on a port of its own, that the test stops and starts again
/// (the shared server is never stopped).
struct PrivateNats {
    port: u16,
    store: tempfile::TempDir,
    child: Option<std::process::Child>,
}

impl PrivateNats {
    fn start() -> Self {
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        let mut server = Self {
            port,
            store: tempfile::tempdir().unwrap(),
            child: None,
        };
        server.resume();
        server
    }

    fn url(&self) -> String {
        format!("nats://127.0.0.1:{}", self.port)
    }

    /// Starts the server on its port and store, and waits until it takes connections.
    fn resume(&mut self) {
        let child = std::process::Command::new("nats-server")
            .args([
                "-a",
                "127.0.0.1",
                "-p",
                &self.port.to_string(),
                "-js",
                "-sd",
            ])
            .arg(self.store.path())
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .spawn()
            .expect("nats-server is installed (scripts/test.sh installs it)");
        self.child = Some(child);
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
        while std::net::TcpStream::connect(("127.0.0.1", self.port)).is_err() {
            assert!(
                std::time::Instant::now() < deadline,
                "nats-server did not start"
            );
            std::thread::sleep(std::time::Duration::from_millis(20));
        }
    }

    /// Stops the server as an operator would (SIGTERM), and waits for it to go.
    fn stop(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = std::process::Command::new("kill")
                .args(["-TERM", &child.id().to_string()])
                .status();
            let _ = child.wait();
        }
    }
}

impl Drop for PrivateNats {
    fn drop(&mut self) {
        if let Some(child) = self.child.as_mut() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

/// The broker stops for 10 s while a relay publishes 400 messages on 8 keys: it waits the
/// outage out (reported on its health, counting nothing against the messages, backing off),
/// resumes by itself, and the stream holds every message once, each key's in order, with
/// nothing dead-lettered.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_broker_stopped_mid_stream_costs_no_message_and_no_order() {
    use std::collections::BTreeMap;
    use std::time::{Duration, Instant};

    let name = "jout_a_broker_stopped_mid_stream_costs_no_message_and_no_order";
    let line =
        guestlist_testkit::brokers::relay::Line::<common::Nats, sqlx::Postgres>::open(name).await;
    let mut server = PrivateNats::start();
    let client = async_nats::connect(server.url()).await.unwrap();
    let context = async_nats::jetstream::new(client);
    let subject = format!("gl.outage.{}", line.rig.tag);
    context
        .create_stream(async_nats::jetstream::stream::Config {
            name: "GL_OUTAGE".to_owned(),
            subjects: vec![subject.clone()],
            ..Default::default()
        })
        .await
        .unwrap();
    let enqueue = async |from: usize, to: usize| {
        for n in from..to {
            line.enqueue_to(
                Some(&subject),
                &format!("evt_{n}"),
                Some(&format!("k{}", n % 8)),
            )
            .await;
        }
    };
    enqueue(0, 300).await;

    let publisher = guestlist_nats::JetStreamPublisher::new(context.clone());
    let relay = line
        .relay(publisher, Duration::from_secs(30))
        .batch(20)
        .confirm_timeout(Duration::from_secs(3));
    let health = relay.health();
    let (stop, running) = guestlist_testkit::run_until_stopped!(relay);
    line.rig
        .until(Duration::from_secs(60), "a first part went out", || async {
            line.published_of(300).await >= 60
        })
        .await;

    server.stop();
    let stopped_at = Instant::now();
    enqueue(300, 400).await;
    let mut seen_down = false;
    while stopped_at.elapsed() < Duration::from_secs(10) {
        seen_down |= !health.is_ready();
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert!(seen_down, "the relay reported the outage");
    assert!(
        line.pending().await > 0,
        "nothing can go out while the broker is down"
    );
    server.resume();

    line.rig
        .until(Duration::from_secs(90), "everything went out", || async {
            line.pending().await == 0
        })
        .await;
    stop.send(()).unwrap();
    let relayed = running.await.unwrap().unwrap();
    eprintln!("after the outage: {relayed:?}");
    // Rounds that time out take half as many messages each time, and wait longer between:
    // a few dozen publishes went unconfirmed in 10 s, not a batch every 0.2 s.
    assert!(relayed.failures < 100, "{relayed:?}");
    assert!(health.is_ready(), "resumed by itself");
    assert_eq!(relayed.dead_lettered, 0, "{relayed:?}");
    assert_eq!(
        line.outbox.dead_count(&line.rig.db.pool).await.unwrap(),
        0,
        "an outage is no message's fault"
    );
    assert_eq!(relayed.published, 400, "{relayed:?}");

    // What the stream holds: each message once (the duplicate window drops a repeat), each
    // key's in the order of its places.
    let mut stream = context.get_stream("GL_OUTAGE").await.unwrap();
    let state = stream.info().await.unwrap().state.clone();
    let mut places: BTreeMap<String, Vec<i64>> = BTreeMap::new();
    let mut ids = std::collections::HashSet::new();
    for sequence in state.first_sequence..=state.last_sequence {
        let message = stream.get_raw_message(sequence).await.unwrap();
        let header = |name: &str| message.headers.get(name).unwrap().as_str().to_owned();
        assert!(
            ids.insert(header("Nats-Msg-Id")),
            "a message twice on the stream"
        );
        places
            .entry(header("Guestlist-Ordering-Key"))
            .or_default()
            .push(header("Guestlist-Seq").parse().unwrap());
    }
    assert_eq!(ids.len(), 400);
    for (key, seqs) in places {
        assert_eq!(
            seqs,
            (1..=50).collect::<Vec<i64>>(),
            "{key}: in the order of its places"
        );
    }
}
