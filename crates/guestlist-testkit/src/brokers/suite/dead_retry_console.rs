//! The console puts a failure group of incoming dead letters back, in Chromium, as an operator
//! does: signs in, asks to retry the group, reads the count on the page that asks, confirms.

use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};
use std::sync::atomic::Ordering;
use std::time::Duration;

use guestlist_sqlx::DeadState;

use crate::Fixture;
use crate::brokers::child::{Running, guestlist_program};
use crate::brokers::suite::dead_retry::dead_lettered;
use crate::brokers::{Broker, Rig};
use crate::webdriver::Browser;

/// The console's token in the story.
const TOKEN: &str = "dl-token-0123456789abcdef";

/// Two dead letters of one failure; the operator retries their group from the console, which
/// first names the count on a page of its own: both are handled once, recorded as retried by
/// the console's session.
pub async fn the_console_retries_a_failure_group_once_confirmed<B: Broker, DB: Fixture>(
    name: &str,
) {
    let rig = Rig::<B, DB>::open(name, Duration::from_secs(30)).await;
    let (stop, task) = dead_lettered(&rig, "evt_w", 2).await;
    let groups = rig.inbox.dead_groups(&rig.db.pool, 100).await.unwrap();
    let group = groups[0].id.clone();
    let (_console, at) = console(&rig);
    let browser = Browser::start().await;
    browser.goto(&format!("{at}/")).await;
    browser.until_shows("#incoming-dead", "2").await;
    browser.type_into("#login input[name=token]", TOKEN).await;
    browser.press("#login button", "#flash", "signed in").await;
    browser
        .until_text(&format!("#group-{group}"), |row| row.contains("warehouse"))
        .await;
    if let Some(path) = std::env::var_os("GUESTLIST_SCREENSHOT_INCOMING") {
        std::fs::write(path, browser.screenshot().await).unwrap();
    }

    rig.cured.store(true, Ordering::SeqCst);
    browser
        .click(&format!("#group-{group} form.group-retry button"))
        .await;
    let asked = browser
        .until_text("#confirm-what", |t| t.contains("holds"))
        .await;
    assert!(asked.contains("holds 2 dead letters"), "{asked}");
    assert_eq!(
        rig.effects().await,
        (0, 0),
        "nothing retried before the confirmation"
    );
    let flash = browser.press("#confirm", "#flash", "back on").await;
    assert!(
        flash.contains(&format!("group {group}: 2 of 2 dead letters back on")),
        "{flash}"
    );
    rig.until(Duration::from_secs(30), "both are handled", || async {
        rig.effects().await == (2, 2)
    })
    .await;
    browser.until_shows("#incoming-dead", "0").await;
    browser.quit().await;
    rig.stop_drained(stop, task, Duration::from_secs(30)).await;
    assert_eq!(rig.effects().await, (2, 2), "each ran once");
    let letters = rig.inbox.dead_letters(&rig.db.pool, 10).await.unwrap();
    assert!(
        letters.iter().all(|l| l.state == DeadState::Retried
            && l.retried_by
                .as_deref()
                .is_some_and(|by| by.starts_with("console-"))),
        "retried by the console's session: {letters:?}"
    );
}

/// `guestlist console` on the rig's inbox and broker, with the story's token; its address.
fn console<B: Broker, DB: Fixture>(rig: &Rig<B, DB>) -> (Running, String) {
    // The SQLite fixture's URL is the file's path.
    let url = match rig.db.url.contains(':') {
        true => rig.db.url.clone(),
        false => format!("sqlite:{}", rig.db.url),
    };
    let table = rig.inbox.table().to_string();
    let mut child = Command::new(guestlist_program())
        .args(["console", "--database", &url, "--inbox-table", &table])
        .args(["--listen", "127.0.0.1:0", "--refresh", "300ms"])
        .args(rig.broker.program_args())
        .env_remove("GUESTLIST_DATABASE_URL")
        .env("GUESTLIST_CONSOLE_TOKEN", TOKEN)
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .expect("start guestlist console");
    let mut line = String::new();
    BufReader::new(child.stdout.take().unwrap())
        .read_line(&mut line)
        .unwrap();
    let running = Running(child);
    let at = line
        .split_whitespace()
        .find(|w| w.starts_with("http://"))
        .unwrap_or_else(|| panic!("the console did not start: {line:?}"))
        .trim_end_matches('/')
        .to_owned();
    (running, at)
}
