//! The `guestlist` program, run as a user runs it.

use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

use guestlist::sqlx::{self, SqlitePool};

mod console;
mod deploy;
mod history;

fn guestlist(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_guestlist"))
        .args(args)
        .env_remove("GUESTLIST_DATABASE_URL")
        .output()
        .expect("run guestlist")
}

fn stdout(output: &Output) -> String {
    String::from_utf8_lossy(&output.stdout).into_owned()
}

fn stderr(output: &Output) -> String {
    String::from_utf8_lossy(&output.stderr).into_owned()
}

/// Starts `guestlist relay` on the outbox at `url`, polling every 50 ms, with `args` (the
/// broker), in the background, what it prints captured.
fn spawn_relay(url: &str, args: &[&str]) -> Child {
    spawn_relay_with_env(url, args, &[])
}

/// Runs `guestlist args` again and again until what it prints contains `text` (30 s at most),
/// and returns that output.
async fn until_shown(args: &[&str], text: &str) -> String {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let shown = stdout(&guestlist(args));
        if shown.contains(text) {
            return shown;
        }
        assert!(
            Instant::now() < deadline,
            "guestlist {args:?} never showed {text:?}:\n{shown}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// Stops `child` as an operator does (SIGTERM), which it must take as a clean stop (no panic,
/// exit status 0), and returns what it printed on stdout and on stderr.
fn terminate(child: Child) -> (String, String) {
    let sent = Command::new("kill")
        .args(["-TERM", &child.id().to_string()])
        .status()
        .unwrap();
    assert!(sent.success(), "kill -TERM {}", child.id());
    let stopped = child.wait_with_output().unwrap();
    let (out, err) = (stdout(&stopped), stderr(&stopped));
    assert!(
        stopped.status.success(),
        "stopped by SIGTERM, it exits cleanly:\n{out}{err}"
    );
    (out, err)
}

/// Runs `guestlist args`, which must fail, and returns what it said on stderr.
fn refused(args: &[&str]) -> String {
    let output = guestlist(args);
    assert!(!output.status.success(), "guestlist {args:?} succeeded");
    stderr(&output)
}

/// The numbers of the demo's row that starts with `chapter`.
fn row(out: &str, chapter: &str) -> Vec<u32> {
    let line = out
        .lines()
        .find(|line| line.starts_with(chapter))
        .unwrap_or_else(|| panic!("no row {chapter:?} in\n{out}"));
    line[chapter.len()..]
        .split_whitespace()
        .filter_map(|word| word.parse().ok())
        .collect()
}

/// Checks the demo's table and notes, counted in its database.
fn assert_the_story(output: &Output) {
    let out = stdout(output);
    assert!(output.status.success(), "{out}{}", stderr(output));
    // deliveries, acks, work committed, pick tasks (and charges, where payments is called)
    assert_eq!(
        row(&out, "OrderPaid evt_9f3k delivered 5 times"),
        [5, 5, 1, 1]
    );
    assert_eq!(row(&out, "a second event, evt_7h2m"), [1, 1, 1, 1]);
    assert_eq!(
        row(&out, "evt_r4c3 reaches two consumers at once"),
        [2, 2, 1, 1]
    );
    assert_eq!(
        row(&out, "consumer SIGKILLed mid-handler, evt_k1ll redelivered"),
        [2, 1, 1, 1]
    );
    assert_eq!(
        row(
            &out,
            "consumer charges, is SIGKILLed, evt_ch4rge redelivered"
        ),
        [2, 1, 1, 1, 1],
        "one charge row in payments"
    );
    // The charge id the killed consumer got, and the one the redelivery got: the same.
    let note = out
        .lines()
        .find(|line| line.starts_with("evt_ch4rge: charged "))
        .unwrap_or_else(|| panic!("no note on the charge in\n{out}"));
    let charges: Vec<&str> = note
        .split(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
        .filter(|word| word.starts_with("ch_"))
        .collect();
    assert_eq!(charges.len(), 2, "{note}");
    assert_eq!(
        charges[0], charges[1],
        "payments replayed the first charge: {note}"
    );
    assert!(note.contains("(warehouse:evt_ch4rge/charge)"), "{note}");
    assert!(out.contains("5 pick tasks, one per event"), "{out}");
}

#[test]
fn demo_tells_the_warehouse_story_on_sqlite() {
    assert_the_story(&guestlist(&["demo"]));
}

#[test]
fn demo_tells_the_same_story_on_postgres() {
    let url = std::env::var("GUESTLIST_TEST_POSTGRES_URL")
        .unwrap_or_else(|_| "postgres://postgres@127.0.0.1:5432/test".to_owned());
    assert_the_story(&guestlist(&["demo", "--database", &url]));
}

#[test]
fn purge_shorter_than_the_horizon_is_refused_before_connecting() {
    let err = refused(&[
        "purge",
        "--database",
        "postgres://nobody@127.0.0.1:1/none",
        "--older-than",
        "1h",
    ]);
    assert!(err.contains("shorter than the redelivery horizon"), "{err}");
}

#[tokio::test]
async fn migrate_then_purge_deletes_only_old_rows() {
    let dir = tempfile::tempdir().unwrap();
    let url = format!("sqlite:{}", dir.path().join("g.db").display());
    let output = guestlist(&["migrate", "--database", &url]);
    assert!(output.status.success(), "{}", stderr(&output));

    let pool = SqlitePool::connect_with(guestlist::sqlite_options(&url).unwrap())
        .await
        .unwrap();
    sqlx::raw_sql(
        "INSERT INTO guestlist_inbox (handler, message_id, seen_at) VALUES
           ('warehouse', 'old-1', strftime('%Y-%m-%d %H:%M:%f', 'now', '-8 days')),
           ('warehouse', 'old-2', strftime('%Y-%m-%d %H:%M:%f', 'now', '-9 days')),
           ('warehouse', 'young', strftime('%Y-%m-%d %H:%M:%f', 'now', '-1 hours')),
           ('billing', 'young', strftime('%Y-%m-%d %H:%M:%f', 'now', '-1 hours'))",
    )
    .execute(&pool)
    .await
    .unwrap();
    let stats = guestlist(&["stats", "--database", &url]);
    assert!(stats.status.success(), "{}", stderr(&stats));
    let shown = stdout(&stats);
    for line in [
        "inbox      guestlist_inbox",
        "rows       4",
        "oldest     9days",
        "handler    billing: 1 row, oldest 1h",
        "handler    warehouse: 3 rows, oldest 9days",
    ] {
        assert!(shown.contains(line), "{line:?} in:\n{shown}");
    }

    let dry = guestlist(&[
        "purge",
        "--database",
        &url,
        "--older-than",
        "7d",
        "--dry-run",
    ]);
    assert!(stdout(&dry).contains("2 rows"), "{}", stdout(&dry));
    let output = guestlist(&["purge", "--database", &url, "--older-than", "7d"]);
    assert!(output.status.success(), "{}", stderr(&output));
    assert!(
        stdout(&output).contains("purged 2 rows"),
        "{}",
        stdout(&output)
    );
    let left: Vec<String> =
        sqlx::query_scalar("SELECT message_id FROM guestlist_inbox WHERE handler = 'warehouse'")
            .fetch_all(&pool)
            .await
            .unwrap();
    assert_eq!(left, ["young"]);
    let shown = stdout(&guestlist(&["stats", "--database", &url]));
    assert!(shown.contains("rows       2"), "{shown}");
    assert!(shown.contains("oldest     1h"), "{shown}");
}

/// The inbox's dead letters go by their own retention, shorter than the horizon if asked
/// (a dead letter guards no duplicate); one being retried stays. A dead-letter table made
/// before copies were kept gains their columns on migrate, its rows kept.
#[tokio::test]
async fn purge_dead_deletes_old_dead_letters_by_their_own_retention() {
    let dir = tempfile::tempdir().unwrap();
    let url = format!("sqlite:{}", dir.path().join("g.db").display());
    let pool = SqlitePool::connect_with(guestlist::sqlite_options(&url).unwrap())
        .await
        .unwrap();
    // The table as it was before copies were kept.
    sqlx::raw_sql(
        "CREATE TABLE guestlist_inbox_dead (handler TEXT NOT NULL, message_id TEXT NOT NULL, \
         reason TEXT NOT NULL, deliveries INTEGER NOT NULL, dead_at INTEGER NOT NULL, \
         PRIMARY KEY (handler, message_id));
         INSERT INTO guestlist_inbox_dead VALUES ('warehouse', 'from-before', 'boom', 5, 0);",
    )
    .execute(&pool)
    .await
    .unwrap();
    let output = guestlist(&["migrate", "--database", &url]);
    assert!(output.status.success(), "{}", stderr(&output));
    let day_ms = 86_400_000_i64;
    let now_ms = i64::try_from(
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_millis(),
    )
    .unwrap();
    for (id, days, state) in [
        ("old", 40, "dead"),
        ("old-retrying", 40, "retrying"),
        ("young", 1, "dead"),
    ] {
        sqlx::query(
            "INSERT INTO guestlist_inbox_dead (handler, message_id, reason, deliveries, dead_at, \
             state) VALUES ('warehouse', ?1, 'boom', 5, ?2, ?3)",
        )
        .bind(id)
        .bind(now_ms - days * day_ms)
        .bind(state)
        .execute(&pool)
        .await
        .unwrap();
    }
    let args = ["purge", "--dead", "--database", &url, "--older-than", "30d"];
    let dry = guestlist(&[&args[..], &["--dry-run"]].concat());
    assert!(stdout(&dry).contains("2 dead letters"), "{}", stdout(&dry));
    let output = guestlist(&args);
    assert!(output.status.success(), "{}", stderr(&output));
    assert!(
        stdout(&output).contains("purged 2 dead letters"),
        "{}",
        stdout(&output)
    );
    let left: Vec<String> =
        sqlx::query_scalar("SELECT message_id FROM guestlist_inbox_dead ORDER BY message_id")
            .fetch_all(&pool)
            .await
            .unwrap();
    assert_eq!(left, ["old-retrying", "young"]);
}

#[test]
fn migrate_print_shows_the_ddl_for_the_url() {
    let output = guestlist(&[
        "migrate",
        "--database",
        "postgres://x@y/z",
        "--print",
        "--table",
        "shop_inbox",
    ]);
    let out = stdout(&output);
    assert!(
        out.contains("CREATE TABLE IF NOT EXISTS shop_inbox"),
        "{out}"
    );
    assert!(out.contains("TIMESTAMPTZ"), "{out}");
}

#[test]
fn bad_urls_and_table_names_say_what_to_do() {
    let err = refused(&["migrate", "--database", "oracle://db"]);
    assert!(err.contains("use postgres://"), "{err}");

    let err = refused(&[
        "migrate",
        "--database",
        "sqlite::memory:",
        "--table",
        "in'box",
    ]);
    assert!(err.contains("not a plain identifier"), "{err}");

    let err = refused(&[
        "migrate",
        "--database",
        "postgres://postgres:secret@127.0.0.1:1/none",
    ]);
    assert!(err.contains("cannot connect to PostgreSQL"), "{err}");
    assert!(!err.contains("secret"), "the password is masked: {err}");
}

#[test]
fn redis_urls_go_where_redis_can_serve_and_say_why_elsewhere() {
    // Redis holds idempotency keys only: the inbox's commands say so and name what works.
    for command in [&["migrate"][..], &["purge", "--older-than", "7d"][..]] {
        let err = refused(&[command, &["--database", "redis://127.0.0.1:6379"]].concat());
        assert!(
            err.contains("Redis, which holds idempotency keys only") && err.contains("postgres://"),
            "{command:?}: {err}"
        );
    }
    // What the gateway cannot do on Redis yet is refused before it listens.
    let err = refused(&[
        "gateway",
        "--upstream",
        "http://127.0.0.1:9",
        "--listen",
        "127.0.0.1:0",
        "--database",
        "redis://127.0.0.1:6379",
        "--max-keys-per-scope",
        "10",
    ]);
    assert!(
        err.contains("--max-keys-per-scope needs a SQL key store"),
        "{err}"
    );
    // A Redis that is not there is named, password masked.
    let err = refused(&["stats", "--database", "redis://:secret@127.0.0.1:1"]);
    assert!(
        err.contains("cannot connect to Redis at") && err.contains("check that Redis runs"),
        "{err}"
    );
    assert!(!err.contains("secret"), "the password is masked: {err}");
}

/// The NATS server the relay tests publish to.
fn nats_url() -> String {
    std::env::var("GUESTLIST_TEST_NATS_URL").unwrap_or_else(|_| "nats://127.0.0.1:4222".to_owned())
}

/// A SQLite outbox in `dir`, migrated by `guestlist migrate --outbox`, holding three messages
/// (`{prefix}_1` to `_3`, on key `order-7`, to `topic`) written with plain SQL, as a service in
/// any language writes them: its business write, the key's next place, the row. Its URL.
async fn outbox_written_by_another_language(
    dir: &tempfile::TempDir,
    prefix: &str,
    topic: &str,
) -> String {
    let url = format!("sqlite:{}", dir.path().join("shop.db").display());
    let migrated = guestlist(&["migrate", "--outbox", "--database", &url]);
    assert!(migrated.status.success(), "{}", stderr(&migrated));
    assert!(stdout(&migrated).contains("guestlist_outbox is ready"));
    let pool = SqlitePool::connect_with(guestlist::sqlite_options(&url).unwrap())
        .await
        .unwrap();
    for n in 1..=3 {
        sqlx::raw_sql(sqlx::AssertSqlSafe(format!(
            "BEGIN IMMEDIATE;
             INSERT INTO guestlist_outbox_keys (ordering_key, last_seq) VALUES ('order-7', 1)
               ON CONFLICT (ordering_key) DO UPDATE SET last_seq = last_seq + 1;
             INSERT INTO guestlist_outbox (message_id, topic, ordering_key, seq, payload)
               VALUES ('{prefix}_{n}', '{topic}', 'order-7',
                       (SELECT last_seq FROM guestlist_outbox_keys WHERE ordering_key = 'order-7'),
                       '{{\"n\":{n}}}');
             COMMIT;"
        )))
        .execute(&pool)
        .await
        .unwrap();
    }
    url
}

#[tokio::test]
async fn relay_publishes_what_another_language_wrote_and_stats_show_it() {
    let dir = tempfile::tempdir().unwrap();
    let url = outbox_written_by_another_language(&dir, "evt_cli", "cli.relay.orders").await;
    let stats = guestlist(&["stats", "--database", &url]);
    assert!(stats.status.success(), "{}", stderr(&stats));
    let shown = stdout(&stats);
    assert!(shown.contains("outbox     guestlist_outbox"), "{shown}");
    assert!(shown.contains("pending    3"), "{shown}");
    assert!(shown.contains("none holds a shard (16 shards)"), "{shown}");

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

    let nats = nats_url();
    let relay = spawn_relay(&url, &["--nats", &nats, "--holder", "cli-relay"]);
    let shown = until_shown(&["stats", "--database", &url], "pending    0").await;
    assert!(shown.contains("cli-relay holds 16 of 16 shards"), "{shown}");

    let (out, _) = terminate(relay);
    assert!(out.contains("published 3 (0 dropped"), "{out}");
    let shown = stdout(&guestlist(&["stats", "--database", &url]));
    assert!(
        shown.contains("none holds a shard"),
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

/// `guestlist relay --sqs` on rows another language wrote: a FIFO queue receives them in the
/// key's order, each with its id as the `message-id` attribute and its key as the group.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn relay_publishes_to_an_sqs_fifo_queue_in_the_keys_order() {
    use guestlist_sqs::aws_sdk_sqs::types::{MessageSystemAttributeName, QueueAttributeName};
    let endpoint = std::env::var("GUESTLIST_TEST_SQS_ENDPOINT")
        .unwrap_or_else(|_| "http://127.0.0.1:5000".to_owned());
    let sqs = guestlist_sqs::local_client(&endpoint);
    let queue = "gl-cli-relay.fifo";
    if let Ok(found) = sqs.get_queue_url().queue_name(queue).send().await {
        let _ = sqs
            .delete_queue()
            .set_queue_url(found.queue_url)
            .send()
            .await;
    }
    let queue_url = sqs
        .create_queue()
        .queue_name(queue)
        .attributes(QueueAttributeName::FifoQueue, "true")
        .send()
        .await
        .expect("moto runs (scripts/test.sh starts it)")
        .queue_url
        .unwrap();

    let dir = tempfile::tempdir().unwrap();
    let url = outbox_written_by_another_language(&dir, "evt_sqs", queue).await;

    let relay = spawn_relay(&url, &["--sqs", "--sqs-endpoint", &endpoint]);
    until_shown(&["stats", "--database", &url], "pending    0").await;
    let (out, _) = terminate(relay);
    assert!(out.contains("to SQS at"), "{out}");

    let received = sqs
        .receive_message()
        .queue_url(&queue_url)
        .max_number_of_messages(10)
        .message_attribute_names("All")
        .message_system_attribute_names(MessageSystemAttributeName::MessageGroupId)
        .send()
        .await
        .unwrap()
        .messages
        .unwrap_or_default();
    assert_eq!(received.len(), 3, "{received:?}");
    for (n, message) in (1..=3).zip(&received) {
        let id = message.message_attributes.as_ref().unwrap()[guestlist_sqs::MESSAGE_ID_ATTRIBUTE]
            .string_value
            .clone();
        assert_eq!(
            id.as_deref(),
            Some(format!("evt_sqs_{n}").as_str()),
            "in the key's order"
        );
        assert_eq!(
            message.body.as_deref(),
            Some(format!("{{\"n\":{n}}}").as_str())
        );
        let group =
            &message.attributes.as_ref().unwrap()[&MessageSystemAttributeName::MessageGroupId];
        assert_eq!(group, "order-7");
    }
}

#[test]
fn relay_without_an_outbox_or_a_broker_says_what_to_do() {
    let dir = tempfile::tempdir().unwrap();
    let url = format!("sqlite:{}", dir.path().join("empty.db").display());
    let missing = guestlist(&["relay", "--database", &url, "--nats", &nats_url()]);
    assert!(!missing.status.success());
    let said = stderr(&missing);
    assert!(said.contains("guestlist migrate --outbox"), "{said}");

    let no_broker = guestlist(&["relay", "--database", &url]);
    assert!(!no_broker.status.success());
    assert!(
        stderr(&no_broker).contains("--amqp")
            && stderr(&no_broker).contains("--kafka")
            && stderr(&no_broker).contains("--sqs"),
        "{}",
        stderr(&no_broker)
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
        stderr(&both).contains("cannot be used with"),
        "{}",
        stderr(&both)
    );
}

/// The RabbitMQ server the relay tests publish to.
fn amqp_url() -> String {
    std::env::var("GUESTLIST_TEST_AMQP_URL")
        .unwrap_or_else(|_| "amqp://guest:guest@127.0.0.1:5672/%2f".to_owned())
}

#[test]
fn relay_refuses_a_broker_it_cannot_reach_and_says_what_to_check() {
    let dir = tempfile::tempdir().unwrap();
    let url = format!("sqlite:{}", dir.path().join("shop.db").display());
    let migrated = guestlist(&["migrate", "--outbox", "--database", &url]);
    assert!(migrated.status.success(), "{}", stderr(&migrated));
    let cases: [(&[&str], &str); 4] = [
        (&["--kafka", ""], "--kafka is empty"),
        (
            &["--kafka", "127.0.0.1:1"],
            "cannot reach Kafka at 127.0.0.1:1",
        ),
        (&["--sqs", "--sqs-endpoint", "not a url"], "is not a URL"),
        (
            &["--sqs", "--sqs-endpoint", "http://127.0.0.1:1"],
            "check the endpoint",
        ),
    ];
    for (broker, says) in cases {
        let started = Instant::now();
        let mut args = vec!["relay", "--database", &url];
        args.extend_from_slice(broker);
        let refused = guestlist(&args);
        assert!(!refused.status.success(), "{broker:?} was taken");
        assert!(
            stderr(&refused).contains(says),
            "{broker:?}: {}",
            stderr(&refused)
        );
        assert!(
            started.elapsed() < Duration::from_secs(30),
            "{broker:?}: refused only after {:?}",
            started.elapsed()
        );
        assert!(!stdout(&refused).contains("relaying"), "{broker:?} started");
    }
    let nowhere = tempfile::tempdir().unwrap();
    let absent = format!("sqlite:{}", nowhere.path().join("absent.db").display());
    let refused = guestlist(&["relay", "--database", &absent, "--nats", &nats_url()]);
    assert!(
        stderr(&refused).contains("no SQLite database at"),
        "{}",
        stderr(&refused)
    );
    assert!(
        !nowhere.path().join("absent.db").exists(),
        "no empty file left behind"
    );
}

/// A row whose id RabbitMQ cannot carry (over 255 bytes, written with plain SQL): the relay
/// dead-letters it at once instead of panicking, and `guestlist outbox dead` lists, retries
/// and drops it.
#[tokio::test]
async fn a_message_rabbitmq_cannot_take_is_dead_lettered_and_the_operator_sees_it() {
    let dir = tempfile::tempdir().unwrap();
    let url = outbox_written_by_another_language(&dir, "evt_dead", "gl-cli-dead").await;
    let pool = SqlitePool::connect_with(guestlist::sqlite_options(&url).unwrap())
        .await
        .unwrap();
    let long = "x".repeat(300);
    sqlx::query(sqlx::AssertSqlSafe(format!(
        "UPDATE guestlist_outbox SET message_id = '{long}' WHERE message_id = 'evt_dead_1'"
    )))
    .execute(&pool)
    .await
    .unwrap();
    let amqp = amqp_url();
    let relay = spawn_relay(&url, &["--amqp", &amqp]);
    let listed = until_shown(&["outbox", "dead", "list", "--database", &url], &long).await;
    let (_, logs) = terminate(relay);
    assert!(
        listed.contains("refused for good") && listed.contains("255"),
        "{listed}"
    );
    assert!(logs.contains("outgoing dead letters"), "{logs}");
    // The two after it go nowhere (no queue is named gl-cli-dead): RabbitMQ returns them, and
    // lapin would log them with their bodies at WARN.
    assert!(logs.contains("the broker refused a message"), "{logs}");
    assert!(
        !logs.contains("{\"n\":2}") && !logs.contains("{\"n\":1}"),
        "no payload in the logs: {logs}"
    );
    // Retried as its failure group: refused until the count is confirmed.
    let groups = stdout(&guestlist(&[
        "outbox",
        "dead",
        "groups",
        "--database",
        &url,
    ]));
    assert!(groups.contains("gl-cli-dead  1 dead letters"), "{groups}");
    let group = groups.split_whitespace().nth(1).unwrap().to_owned();
    let retry = [
        "outbox",
        "dead",
        "retry",
        "--group",
        &group,
        "--database",
        &url,
    ];
    let unconfirmed = guestlist(&retry);
    assert!(!unconfirmed.status.success());
    assert!(
        stderr(&unconfirmed).contains("--confirm 1"),
        "{}",
        stderr(&unconfirmed)
    );
    let retried = guestlist(&[&retry[..], &["--confirm", "1"]].concat());
    assert!(retried.status.success(), "{}", stderr(&retried));
    let none = guestlist(&["outbox", "dead", "list", "--database", &url]);
    assert!(
        stdout(&none).contains("no dead letters"),
        "{}",
        stdout(&none)
    );
    let pending: i64 =
        sqlx::query_scalar("SELECT count(*) FROM guestlist_outbox WHERE published_at IS NULL")
            .fetch_one(&pool)
            .await
            .unwrap();
    assert_eq!(
        pending, 3,
        "back in the outbox, beside the two no queue took"
    );
    let dropped = guestlist(&["outbox", "dead", "drop", "12345", "--database", &url]);
    assert!(!dropped.status.success());
    assert!(
        stderr(&dropped).contains("no dead letter 12345"),
        "{}",
        stderr(&dropped)
    );
}

/// [`spawn_relay`], with `env` added to the relay's environment (a clock off).
fn spawn_relay_with_env(url: &str, args: &[&str], env: &[(&str, String)]) -> Child {
    Command::new(env!("CARGO_BIN_EXE_guestlist"))
        .args(["relay", "--database", url, "--poll", "50ms"])
        .args(args)
        .env_remove("GUESTLIST_DATABASE_URL")
        .envs(env.iter().map(|(name, value)| (*name, value.as_str())))
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("start guestlist")
}

/// Three `guestlist relay` processes on one PostgreSQL outbox, one ten minutes behind and one
/// ten minutes ahead (libfaketime): the lease is taken, renewed and judged on the database's
/// clock, so the relay behind keeps it while it runs (the one on time never takes it over
/// early), the one on time takes it over within a lease of the other's SIGKILL (not ten
/// minutes later), and the one ahead, standing by, never takes it from the one on time. Every
/// message reaches the stream once, in its key's order.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn relays_whose_clocks_are_off_take_no_lease_over_early_or_late() {
    use guestlist::sqlx::postgres::PgPoolOptions;
    use guestlist_testkit::skewed_clock;

    const TABLE: &str = "cli_clock_outbox";
    const TOPIC: &str = "cli.clock.orders";
    let url = std::env::var("GUESTLIST_TEST_POSTGRES_URL")
        .unwrap_or_else(|_| "postgres://postgres@127.0.0.1:5432/test".to_owned());
    let pool = PgPoolOptions::new()
        .max_connections(2)
        .connect(&url)
        .await
        .expect("PostgreSQL runs");
    for suffix in ["", "_keys", "_relay", "_relays", "_dead"] {
        sqlx::raw_sql(sqlx::AssertSqlSafe(format!(
            "DROP TABLE IF EXISTS {TABLE}{suffix}"
        )))
        .execute(&pool)
        .await
        .unwrap();
    }
    let outbox = guestlist::Outbox::<sqlx::Postgres>::with_table(TABLE).unwrap();
    outbox.migrate(&pool).await.unwrap();
    // One shard: the relays take turns through its lease, as the story needs.
    let shards = guestlist(&[
        "outbox",
        "shards",
        "--database",
        &url,
        "--outbox-table",
        TABLE,
        "1",
    ]);
    assert!(shards.status.success(), "{}", stderr(&shards));
    assert!(
        stdout(&shards).contains("has 1 shards now"),
        "{}",
        stdout(&shards)
    );
    let enqueue = async |from: usize, to: usize| {
        for n in from..to {
            let mut tx = pool.begin().await.unwrap();
            let message = guestlist::Outgoing::new(
                guestlist::Topic::new(TOPIC).unwrap(),
                format!("{{\"n\":{n}}}"),
            )
            .id(guestlist::MessageId::new(format!("evt_clock_{n}")).unwrap())
            .ordering_key(guestlist::outbox::OrderingKey::new(format!("order-{}", n % 3)).unwrap());
            outbox.enqueue(&mut tx, &message).await.unwrap();
            tx.commit().await.unwrap();
        }
    };
    let nats = async_nats::connect(nats_url()).await.expect("NATS runs");
    let jetstream = async_nats::jetstream::new(nats);
    let _ = jetstream.delete_stream("GL_CLI_CLOCK").await;
    jetstream
        .create_stream(async_nats::jetstream::stream::Config {
            name: "GL_CLI_CLOCK".to_owned(),
            subjects: vec![TOPIC.to_owned()],
            ..Default::default()
        })
        .await
        .unwrap();
    let stats = ["stats", "--database", &url, "--outbox-table", TABLE];
    let holder_is = |holder: &str| {
        let shown = stdout(&guestlist(&stats));
        shown.contains(&format!("{holder} holds 1 of 1 shards"))
    };
    let nats = nats_url();
    let relay = |holder: &'static str, offset: Option<&str>| {
        let args = [
            "--nats",
            &nats,
            "--outbox-table",
            TABLE,
            "--lease",
            "2s",
            "--holder",
            holder,
        ];
        match offset {
            Some(offset) => spawn_relay_with_env(&url, &args, &skewed_clock::env(offset)),
            None => spawn_relay(&url, &args),
        }
    };

    enqueue(0, 30).await;
    let mut behind = relay("behind", Some("-10m"));
    until_shown(&stats, "behind holds 1 of 1 shards").await;
    let on_time = relay("on-time", None);
    enqueue(30, 60).await;
    for _ in 0..25 {
        assert!(
            holder_is("behind"),
            "the relay ten minutes behind keeps its lease while it runs"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }

    behind.kill().unwrap();
    behind.wait().unwrap();
    let killed = Instant::now();
    until_shown(&stats, "on-time holds 1 of 1 shards").await;
    let took_over = killed.elapsed();
    assert!(
        took_over < Duration::from_secs(6),
        "taken over within a lease of 2 s and a poll, not ten minutes later: {took_over:?}"
    );

    let ahead = relay("ahead", Some("+10m"));
    enqueue(60, 90).await;
    for _ in 0..25 {
        assert!(
            holder_is("on-time"),
            "the relay ten minutes ahead takes no lease that is still held"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    until_shown(&stats, "pending    0").await;
    let (ahead_out, _) = terminate(ahead);
    let (on_time_out, _) = terminate(on_time);

    let mut stream = jetstream.get_stream("GL_CLI_CLOCK").await.unwrap();
    let state = stream.info().await.unwrap().state.clone();
    let mut seqs: std::collections::BTreeMap<String, Vec<i64>> = Default::default();
    let mut ids = std::collections::HashSet::new();
    for sequence in state.first_sequence..=state.last_sequence {
        let message = stream.get_raw_message(sequence).await.unwrap();
        let header = |name: &str| message.headers.get(name).unwrap().as_str().to_owned();
        assert!(ids.insert(header("Nats-Msg-Id")), "a message twice");
        seqs.entry(header("Guestlist-Ordering-Key"))
            .or_default()
            .push(header("Guestlist-Seq").parse().unwrap());
    }
    assert_eq!(
        ids.len(),
        90,
        "every message once:\n{on_time_out}\n{ahead_out}"
    );
    for (key, seqs) in seqs {
        assert_eq!(seqs, (1..=30).collect::<Vec<i64>>(), "{key}: in its order");
    }
}

/// A message NATS can never take (a header over its limit) goes to the outgoing dead letters;
/// the operator looks at it, drops the header, fixes the body, sets another header, and puts
/// it back: the relay publishes it edited, marked with who edited it.
#[tokio::test]
async fn an_outgoing_dead_letter_edited_and_retried_is_published_as_edited() {
    let nats = async_nats::connect(nats_url()).await.expect("NATS runs");
    let jetstream = async_nats::jetstream::new(nats);
    let _ = jetstream.delete_stream("GL_CLI_EDIT").await;
    let stream = jetstream
        .create_stream(async_nats::jetstream::stream::Config {
            name: "GL_CLI_EDIT".to_owned(),
            subjects: vec!["cli.edit.orders".to_owned()],
            ..Default::default()
        })
        .await
        .unwrap();
    let dir = tempfile::tempdir().unwrap();
    let url = outbox_written_by_another_language(&dir, "evt_edit", "cli.edit.orders").await;
    let pool = SqlitePool::connect_with(guestlist::sqlite_options(&url).unwrap())
        .await
        .unwrap();
    let huge = format!("trace-id: t-1\r\nx-debug: {}\r\n", "d".repeat(100_000));
    sqlx::query("UPDATE guestlist_outbox SET headers = ?1 WHERE message_id = 'evt_edit_1'")
        .bind(huge.as_bytes())
        .execute(&pool)
        .await
        .unwrap();
    let nats = nats_url();
    let relay = spawn_relay(&url, &["--nats", &nats]);
    let listed = until_shown(
        &["outbox", "dead", "list", "--database", &url],
        "evt_edit_1",
    )
    .await;
    assert!(listed.contains("headers take"), "{listed}");
    let id = listed.split_whitespace().next().unwrap().to_owned();
    let shown = stdout(&guestlist(&[
        "outbox",
        "dead",
        "show",
        &id,
        "--database",
        &url,
    ]));
    assert!(shown.contains("header  trace-id: t-1"), "{shown}");
    assert!(shown.contains("body    7 bytes:\n{\"n\":1}"), "{shown}");

    let body = dir.path().join("fixed.json");
    std::fs::write(&body, br#"{"n":1,"fixed":true}"#).unwrap();
    let retried = guestlist(&[
        "outbox",
        "dead",
        "retry",
        &id,
        "--database",
        &url,
        "--body",
        body.to_str().unwrap(),
        "--drop-header",
        "X-Debug",
        "--header",
        "content-type=application/json",
        "--by",
        "alice",
    ]);
    assert!(retried.status.success(), "{}", stderr(&retried));
    assert!(
        stdout(&retried).contains("is back, edited, in"),
        "{}",
        stdout(&retried)
    );
    let deadline = Instant::now() + Duration::from_secs(30);
    let last = loop {
        let last = stream
            .get_last_raw_message_by_subject("cli.edit.orders")
            .await
            .unwrap();
        if last.payload.as_ref() == br#"{"n":1,"fixed":true}"# {
            break last;
        }
        assert!(Instant::now() < deadline, "the edited message is published");
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    terminate(relay);
    let header = |name: &str| last.headers.get(name).map(|v| v.as_str().to_owned());
    assert_eq!(header("guestlist-edited-by").as_deref(), Some("alice"));
    assert_eq!(header("content-type").as_deref(), Some("application/json"));
    assert_eq!(
        header("trace-id").as_deref(),
        Some("t-1"),
        "the others stay"
    );
    assert_eq!(header("x-debug"), None, "the dropped header is gone");
    let none = stdout(&guestlist(&["outbox", "dead", "list", "--database", &url]));
    assert!(none.contains("no dead letters"), "{none}");
}
