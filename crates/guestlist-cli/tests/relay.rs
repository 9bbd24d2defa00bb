//! `guestlist relay` and the outbox's `guestlist stats`, run as an operator runs them, on an
//! outbox a service in another language writes with plain SQL.

use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

use guestlist::sqlx::{self, SqlitePool};

fn guestlist(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_guestlist"))
        .args(args)
        .env_remove("GUESTLIST_DATABASE_URL")
        .output()
        .expect("run guestlist")
}

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

fn nats_url() -> String {
    std::env::var("GUESTLIST_TEST_NATS_URL").unwrap_or_else(|_| "nats://127.0.0.1:4222".to_owned())
}

#[tokio::test]
async fn relay_publishes_what_another_language_wrote_and_stats_show_it() {
    let dir = tempfile::tempdir().unwrap();
    let url = format!("sqlite:{}", dir.path().join("shop.db").display());
    let migrated = guestlist(&["migrate", "--outbox", "--database", &url]);
    assert!(migrated.status.success(), "{}", text(&migrated.stderr));
    assert!(text(&migrated.stdout).contains("guestlist_outbox is ready"));

    // What a service in any language does: its business write, the key's next place, the row.
    let pool = SqlitePool::connect_with(guestlist::sqlite_options(&url).unwrap())
        .await
        .unwrap();
    for n in 1..=3 {
        sqlx::raw_sql(sqlx::AssertSqlSafe(format!(
            "BEGIN IMMEDIATE;
             INSERT INTO guestlist_outbox_keys (ordering_key, last_seq) VALUES ('order-7', 1)
               ON CONFLICT (ordering_key) DO UPDATE SET last_seq = last_seq + 1;
             INSERT INTO guestlist_outbox (message_id, topic, ordering_key, seq, payload)
               VALUES ('evt_cli_{n}', 'cli.relay.orders', 'order-7',
                       (SELECT last_seq FROM guestlist_outbox_keys WHERE ordering_key = 'order-7'),
                       '{{\"n\":{n}}}');
             COMMIT;"
        )))
        .execute(&pool)
        .await
        .unwrap();
    }
    let stats = guestlist(&["stats", "--database", &url]);
    assert!(stats.status.success(), "{}", text(&stats.stderr));
    let shown = text(&stats.stdout);
    assert!(shown.contains("outbox     guestlist_outbox"), "{shown}");
    assert!(shown.contains("pending    3"), "{shown}");
    assert!(shown.contains("none holds the lease"), "{shown}");

    let nats = async_nats::connect(nats_url()).await.expect("NATS runs");
    let jetstream = async_nats::jetstream::new(nats);
    let _ = jetstream.delete_stream("GL_CLI_RELAY").await;
    jetstream
        .create_stream(async_nats::jetstream::stream::Config {
            name: "GL_CLI_RELAY".to_owned(),
            subjects: vec!["cli.relay.orders".to_owned()],
            ..Default::default()
        })
        .await
        .unwrap();

    let relay = Command::new(env!("CARGO_BIN_EXE_guestlist"))
        .args(["relay", "--database", &url, "--nats", &nats_url()])
        .args(["--poll", "50ms", "--holder", "cli-relay"])
        .env_remove("GUESTLIST_DATABASE_URL")
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let deadline = Instant::now() + Duration::from_secs(30);
    let shown = loop {
        let stats = text(&guestlist(&["stats", "--database", &url]).stdout);
        if stats.contains("pending    0") {
            break stats;
        }
        assert!(
            Instant::now() < deadline,
            "the relay never caught up:\n{stats}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    assert!(shown.contains("cli-relay holds the lease"), "{shown}");

    let sent = Command::new("kill")
        .args(["-TERM", &relay.id().to_string()])
        .status()
        .unwrap();
    assert!(sent.success());
    let stopped = relay.wait_with_output().unwrap();
    assert!(stopped.status.success(), "{}", text(&stopped.stderr));
    assert!(
        text(&stopped.stdout).contains("published 3 (0 dropped"),
        "{}",
        text(&stopped.stdout)
    );
    let shown = text(&guestlist(&["stats", "--database", &url]).stdout);
    assert!(
        shown.contains("none holds the lease"),
        "given up on SIGTERM:\n{shown}"
    );

    let mut stream = jetstream.get_stream("GL_CLI_RELAY").await.unwrap();
    assert_eq!(stream.info().await.unwrap().state.messages, 3);
    for (sequence, n) in (1..=3).zip(1..=3) {
        let message = stream.get_raw_message(sequence).await.unwrap();
        let id = message
            .headers
            .get("Nats-Msg-Id")
            .unwrap()
            .as_str()
            .to_owned();
        assert_eq!(id, format!("evt_cli_{n}"), "in the key's order");
        assert_eq!(
            message.payload.as_ref(),
            format!("{{\"n\":{n}}}").as_bytes()
        );
    }
}

#[test]
fn relay_without_an_outbox_or_a_broker_says_what_to_do() {
    let dir = tempfile::tempdir().unwrap();
    let url = format!("sqlite:{}", dir.path().join("empty.db").display());
    let missing = guestlist(&["relay", "--database", &url, "--nats", &nats_url()]);
    assert!(!missing.status.success());
    let said = text(&missing.stderr);
    assert!(said.contains("guestlist migrate --outbox"), "{said}");

    let no_broker = guestlist(&["relay", "--database", &url]);
    assert!(!no_broker.status.success());
    assert!(
        text(&no_broker.stderr).contains("--amqp"),
        "{}",
        text(&no_broker.stderr)
    );

    let both = guestlist(&[
        "relay",
        "--database",
        &url,
        "--nats",
        "nats://x",
        "--amqp",
        "amqp://x",
    ]);
    assert!(!both.status.success());
    assert!(
        text(&both.stderr).contains("cannot be used with"),
        "{}",
        text(&both.stderr)
    );
}
