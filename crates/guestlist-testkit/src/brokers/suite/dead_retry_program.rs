//! The `guestlist inbox dead` commands against a real consumer's dead letters, as an operator
//! runs them: groups, list, a group retry refused until its count is confirmed, then done,
//! show, drop.

use std::process::{Command, Output};
use std::sync::atomic::Ordering;
use std::time::Duration;

use crate::Fixture;
use crate::brokers::child::guestlist_program;
use crate::brokers::suite::dead_retry::{dead_lettered, effects_of};
use crate::brokers::{Broker, Rig};

/// Two messages dead-lettered; their group retried from the command line, which first asks
/// for the count and then puts both back: each handled once; one shown, retried by its
/// operator; one dropped.
pub async fn the_program_retries_a_failure_group_once_confirmed<B: Broker, DB: Fixture>(
    name: &str,
) {
    let rig = Rig::<B, DB>::open(name, Duration::from_secs(30)).await;
    let (stop, task) = dead_lettered(&rig, "evt_c", 2).await;
    let table = rig.inbox.table().to_string();
    // The SQLite fixture's URL is the file's path.
    let url = match rig.db.url.contains(':') {
        true => rig.db.url.clone(),
        false => format!("sqlite:{}", rig.db.url),
    };
    let run = |args: &[&str]| -> Output {
        Command::new(guestlist_program())
            .args(["inbox", "dead"])
            .args(args)
            .args(["--database", &url, "--table", &table])
            .env_remove("GUESTLIST_DATABASE_URL")
            .output()
            .unwrap()
    };
    let text = |output: &Output| {
        format!(
            "{}{}",
            String::from_utf8_lossy(&output.stdout),
            String::from_utf8_lossy(&output.stderr)
        )
    };

    let groups = run(&["groups"]);
    let shown = text(&groups);
    assert!(groups.status.success(), "{shown}");
    assert!(shown.contains("warehouse  2 dead letters"), "{shown}");
    let group = shown
        .split_whitespace()
        .nth(1)
        .expect("`group <id>` first")
        .to_owned();
    let list = text(&run(&["list"]));
    assert!(
        list.contains("evt_c0") && list.contains(r#""kind":"poison""#),
        "{list}"
    );

    let mut retry = vec!["retry", "--group", group.as_str(), "--by", "alice"];
    let broker_args = rig.broker.program_args();
    retry.extend(broker_args.iter().map(String::as_str));
    let unconfirmed = run(&retry);
    assert!(
        !unconfirmed.status.success(),
        "a group needs its count confirmed"
    );
    assert!(
        text(&unconfirmed).contains("--confirm 2"),
        "{}",
        text(&unconfirmed)
    );
    assert_eq!(rig.effects().await, (0, 0));

    rig.cured.store(true, Ordering::SeqCst);
    retry.extend(["--confirm", "2"]);
    let retried = run(&retry);
    assert!(retried.status.success(), "{}", text(&retried));
    assert!(
        text(&retried).contains("retried warehouse evt_c0 (retry 1)"),
        "{}",
        text(&retried)
    );
    rig.until(Duration::from_secs(30), "both are handled", || async {
        rig.effects().await == (2, 2)
    })
    .await;

    let show = text(&run(&["show", "warehouse", "evt_c1"]));
    assert!(
        show.contains("retried (retried 1 time, last by alice"),
        "{show}"
    );
    assert!(show.contains("header      x-tenant: acme"), "{show}");
    let dropped = run(&["drop", "warehouse", "evt_c1"]);
    assert!(
        text(&dropped).contains("dropped warehouse evt_c1"),
        "{}",
        text(&dropped)
    );
    assert!(!run(&["show", "warehouse", "evt_c1"]).status.success());
    rig.stop_drained(stop, task, Duration::from_secs(30)).await;
    assert_eq!(effects_of(&rig, "evt_c0").await, 1);
    assert_eq!(rig.effects().await, (2, 2), "each ran once");
}
