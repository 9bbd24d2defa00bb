//! `guestlist console` in a real browser (headless Chromium through chromedriver): an operator
//! reads the figures, looks a key up, signs in, retries a dead letter and evicts a key, and
//! the page keeps up with the database by itself; forms without the session's CSRF token and
//! a console started without a token take no action.

use std::io::{BufRead, BufReader};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use guestlist::sqlx::{Sqlite, SqlitePool};
use guestlist::{
    Claim, HandlerName, IdempotencyKey, Inbox, KeyStore, MessageId, Outbox, Outgoing, Relay,
    SqlKeyStore, Topic,
    keys::{Fingerprint, KeyClaim, Scope, StoredBody, StoredResponse},
    outbox::{Confirmed, OutboxMessage, Outcomes, Publish, PublishError},
};
use reqwest::StatusCode;

use super::{guestlist, stderr};
use guestlist_testkit::webdriver::Browser;

mod hour;

const TOKEN: &str = "co-token-0123456789abcdef";

/// What a browser's form sends as.
const FORM: &str = "application/x-www-form-urlencoded";

/// A broker with no place for topic `nowhere`: it can never take those messages, so the relay
/// dead-letters them at once; it confirms every other message.
struct NowhereRefused;

impl Publish for NowhereRefused {
    fn check(&self, message: &OutboxMessage) -> Result<(), PublishError> {
        match message.topic.as_str() {
            "nowhere" => Err(PublishError::unpublishable("no stream takes topic nowhere")),
            _ => Ok(()),
        }
    }

    async fn publish(&self, messages: &[OutboxMessage], outcomes: &mut Outcomes) {
        for _ in messages {
            outcomes.push(Ok(Confirmed::New));
        }
    }
}

/// A shop's database after a little traffic: a handled event, a stored key and one in
/// flight, a dead letter, and a message waiting for the relay.
struct Shop {
    _dir: tempfile::TempDir,
    url: String,
    pool: SqlitePool,
    outbox: Outbox<Sqlite>,
    keys: SqlKeyStore<Sqlite>,
}

impl Shop {
    async fn open() -> Self {
        let dir = tempfile::tempdir().unwrap();
        let url = format!("sqlite:{}", dir.path().join("shop.db").display());
        for args in [
            &["migrate", "--database", &url][..],
            &["migrate", "--outbox", "--database", &url],
        ] {
            let migrated = guestlist(args);
            assert!(migrated.status.success(), "{}", stderr(&migrated));
        }
        let pool = SqlitePool::connect_with(guestlist::sqlite_options(&url).unwrap())
            .await
            .unwrap();
        let keys = SqlKeyStore::with_table(pool.clone(), "guestlist_keys").unwrap();
        keys.migrate().await.unwrap();
        let shop = Self {
            _dir: dir,
            url,
            outbox: Outbox::new(),
            keys,
            pool,
        };
        let scope = Scope::new("client-shop").unwrap();
        for (key, answered) in [("order-7", true), ("order-8", false)] {
            let key = IdempotencyKey::new(key).unwrap();
            let fingerprint = Fingerprint::builder("POST", "/orders").body(key.as_str().as_bytes());
            let taken = shop
                .keys
                .claim(&scope, &key, &fingerprint, Duration::from_secs(600));
            let KeyClaim::Run { attempt } = taken.await.unwrap() else {
                panic!("a new key runs");
            };
            if answered {
                let created = StoredResponse {
                    status: 201,
                    headers: vec![],
                    body: StoredBody::Bytes(b"{}".to_vec()),
                };
                shop.keys
                    .complete(&scope, &key, attempt, &created)
                    .await
                    .unwrap();
            }
        }
        let mut tx = shop.pool.begin().await.unwrap();
        let warehouse = HandlerName::new("warehouse").unwrap();
        let evt = MessageId::new("evt_1").unwrap();
        let claim = Inbox::<Sqlite>::new()
            .claim(&mut *tx, &warehouse, &evt)
            .await;
        assert_eq!(claim.unwrap(), Claim::Fresh);
        tx.commit().await.unwrap();
        // A message the warehouse's consumer gave up on.
        Inbox::<Sqlite>::new()
            .record_dead(
                &shop.pool,
                &warehouse,
                &MessageId::new("evt_poison").unwrap(),
                "failed on delivery 5 of 5: no such order",
                5,
                guestlist::inbox::DeadCopy {
                    topic: Some("orders.paid"),
                    key: None,
                    headers: &[],
                    body: br#"{"order": 404}"#,
                },
            )
            .await
            .unwrap();
        // A message whose handler's run stopped after its first step.
        let stopped = Inbox::<Sqlite>::new()
            .process_steps(
                &shop.pool,
                &warehouse,
                &MessageId::new("evt_mid").unwrap(),
                async |steps| {
                    let _: String = steps
                        .external("charge", || async { anyhow::Ok("ch_1".to_owned()) })
                        .await?;
                    anyhow::bail!("the warehouse is closed")
                },
                async |_tx, ()| anyhow::Ok(()),
            )
            .await;
        assert!(stopped.is_err());
        shop.enqueue("evt_refused", "nowhere").await;
        shop.relay().await;
        shop.enqueue("evt_next", "orders.paid").await;
        shop
    }

    async fn enqueue(&self, id: &str, topic: &str) {
        let mut tx = self.pool.begin().await.unwrap();
        let message = Outgoing::new(Topic::new(topic).unwrap(), b"{}".to_vec())
            .id(MessageId::new(id).unwrap());
        self.outbox.enqueue(&mut *tx, &message).await.unwrap();
        tx.commit().await.unwrap();
    }

    /// Publishes what is pending: `nowhere`'s messages go to the dead letters.
    async fn relay(&self) {
        let relay = Relay::new(self.outbox.clone(), self.pool.clone(), NowhereRefused);
        relay.drain().await.unwrap();
    }

    async fn dead(&self) -> u64 {
        self.outbox.dead_count(&self.pool).await.unwrap()
    }

    async fn dead_letter_id(&self) -> i64 {
        self.outbox.dead_letters(&self.pool, 1).await.unwrap()[0].id
    }

    /// Starts `guestlist console` on a free port, with `token` if any, refreshing every 300
    /// ms; returns it with its address.
    fn console(&self, token: Option<&str>) -> (Running, String) {
        self.console_with(token, &["--listen", "127.0.0.1:0"])
    }

    /// [`Shop::console`] with `args` (where it listens, at least).
    fn console_with(&self, token: Option<&str>, args: &[&str]) -> (Running, String) {
        let mut command = Command::new(env!("CARGO_BIN_EXE_guestlist"));
        command
            .args(["console", "--database", &self.url])
            .args(args)
            .args(["--refresh", "300ms"])
            .env_remove("GUESTLIST_DATABASE_URL")
            .env_remove("GUESTLIST_CONSOLE_TOKEN")
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        if let Some(token) = token {
            command.env("GUESTLIST_CONSOLE_TOKEN", token);
        }
        let mut child = command.spawn().expect("start guestlist console");
        let mut line = String::new();
        BufReader::new(child.stdout.take().unwrap())
            .read_line(&mut line)
            .unwrap();
        let Some(at) = line.split_whitespace().find(|w| w.starts_with("http://")) else {
            let _ = child.kill();
            let out = child.wait_with_output().unwrap();
            panic!("the console did not start: {line:?} {}", stderr(&out));
        };
        let address = at.trim_end_matches('/').to_owned();
        (Running(child), address)
    }
}

/// A console that stops with the story.
struct Running(Child);

impl Drop for Running {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// A client that follows no redirect, to see the console's answers as they are.
fn client() -> reqwest::Client {
    reqwest::Client::builder()
        .redirect(reqwest::redirect::Policy::none())
        .build()
        .unwrap()
}

/// Posts the form `body` to `url`, with the session `cookie` if any.
async fn post_form(
    http: &reqwest::Client,
    url: String,
    cookie: Option<&str>,
    body: String,
) -> reqwest::Response {
    let mut request = http.post(url).header("content-type", FORM).body(body);
    if let Some(cookie) = cookie {
        request = request.header("cookie", cookie);
    }
    request.send().await.unwrap()
}

/// The console's page as the browser holding `cookie` gets it.
async fn page_of(http: &reqwest::Client, at: &str, cookie: &str) -> String {
    let page = http.get(format!("{at}/")).header("cookie", cookie).send();
    page.await.unwrap().text().await.unwrap()
}

/// The quoted value that follows `marker` in `page` (a signed-in page's CSRF token, an id).
fn value_after(page: &str, marker: &str) -> String {
    let rest = page.split(marker).nth(1);
    let value = rest.and_then(|rest| rest.split('"').next());
    value
        .unwrap_or_else(|| panic!("{marker} in {page}"))
        .to_owned()
}

/// Signs in with the console's token: its answer (the redirect, the `Set-Cookie`), and the
/// session cookie to send back.
async fn sign_in(http: &reqwest::Client, at: &str) -> (reqwest::Response, String) {
    let signed_in = post_form(http, format!("{at}/login"), None, format!("token={TOKEN}")).await;
    let cookie = signed_in.headers()["set-cookie"].to_str().unwrap();
    let cookie = cookie.split(';').next().unwrap().to_owned();
    (signed_in, cookie)
}

#[tokio::test]
async fn console_operator_looks_up_a_key_retries_a_dead_letter_and_sees_the_counts_change() {
    let shop = Shop::open().await;
    let (_console, at) = shop.console(Some(TOKEN));
    let browser = Browser::start().await;

    browser.goto(&format!("{at}/")).await;
    browser.until_shows("#outbox-dead", "1").await;
    browser.until_shows("#outbox-pending", "1").await;
    browser.until_shows("#inbox-rows", "1").await;
    browser.until_shows("#incoming-dead", "1").await;
    browser
        .until_text("#incoming", |t| {
            t.contains("evt_poison") && t.contains("no such order") && t.contains("warehouse")
        })
        .await;
    browser
        .until_text("#mid-steps", |t| {
            t.contains("evt_mid") && t.contains("the step after charge") && t.contains("ended")
        })
        .await;
    browser.until_shows("#keys-rows", "2").await;
    browser.until_shows("#keys-in-flight", "1").await;
    // The key in flight, listed with its lease; not the answered one.
    browser
        .until_text("#held", |t| {
            t.contains("order-8") && t.contains("left") && !t.contains("order-7")
        })
        .await;
    browser
        .until_text("#handlers", |t| t.contains("warehouse"))
        .await;
    assert!(
        browser.all("form.retry").await.is_empty(),
        "no action before signing in"
    );

    browser
        .type_into("#trace input[name=trace]", "order-7")
        .await;
    let found = browser
        .press("#trace button", "#trace-result", "order-7")
        .await;
    assert!(
        found.contains("key order-7 taken in scope client-shop, attempt 1: stored: status 201"),
        "{found}"
    );
    assert!(browser.all("form.evict").await.is_empty(), "{found}");

    browser.type_into("#login input[name=token]", TOKEN).await;
    browser.press("#login button", "#flash", "signed in").await;
    let id = shop.dead_letter_id().await;
    let retry = format!("#dead-{id} form.retry button");
    let flash = browser.press(&retry, "#flash", "back in").await;
    assert!(
        flash.contains(&format!("dead letter {id} is back in guestlist_outbox")),
        "{flash}"
    );
    browser.until_shows("#outbox-dead", "0").await;
    browser.until_shows("#outbox-pending", "2").await;
    assert_eq!(shop.dead().await, 0, "retried in the database too");
    // The charts keep up: this minute's sample is the burst the retry made.
    browser
        .until_text("#chart-pending", |t| t.contains("outbox pending (now 2)"))
        .await;
    browser
        .until_text("#chart-dead", |t| {
            t.contains("outgoing dead letters (now 0)")
        })
        .await;
    assert!(
        !browser.all("#chart-pending svg polyline").await.is_empty(),
        "drawn as SVG"
    );
    // From the tables' own timestamps: the claim the shop made, the key taken, the messages
    // written this minute.
    browser
        .until_text("#chart-handled", |t| {
            t.contains("warehouse (1 in the last hour)")
        })
        .await;
    browser
        .until_text("#chart-keys-taken", |t| {
            t.contains("taken (2 in the last hour)")
        })
        .await;
    browser
        .until_text("#chart-outbox-activity", |t| {
            t.contains("written (2 in the last hour)")
        })
        .await;

    // The page keeps up by itself: the relay refuses the message again, and publishes the other.
    shop.relay().await;
    browser.until_shows("#outbox-dead", "1").await;
    browser.until_shows("#outbox-pending", "0").await;

    browser.goto(&format!("{at}/?span=day")).await;
    browser
        .until_text("#over-time", |t| t.contains("The last day"))
        .await;
    browser.goto(&format!("{at}/?trace=order-7")).await;
    browser.until_shows("#outbox-dead", "1").await;
    let shot = browser.screenshot().await;
    assert!(shot.starts_with(b"\x89PNG"), "a PNG");
    if let Some(path) = std::env::var_os("GUESTLIST_SCREENSHOT") {
        std::fs::write(path, &shot).unwrap();
    }

    let evict = "#trace-result form.evict button";
    let flash = browser.press(evict, "#flash", "evicted").await;
    assert!(
        flash.contains("key order-7 in scope client-shop evicted"),
        "{flash}"
    );
    let (scope, key) = (
        Scope::new("client-shop").unwrap(),
        IdempotencyKey::new("order-7").unwrap(),
    );
    assert_eq!(shop.keys.inspect(&scope, &key).await.unwrap(), None);
    browser.until_shows("#keys-rows", "1").await;
    browser.quit().await;

    // A form without this session's CSRF token, or sent from another site, does nothing.
    let http = client();
    let (signed_in, cookie) = sign_in(&http, &at).await;
    assert_eq!(signed_in.status(), StatusCode::SEE_OTHER);
    let set_cookie = signed_in.headers()["set-cookie"].to_str().unwrap();
    assert!(
        set_cookie.contains("HttpOnly") && set_cookie.contains("SameSite=Strict"),
        "{set_cookie}"
    );
    let id = shop.dead_letter_id().await;
    for (csrf, origin) in [
        ("", at.as_str()),
        ("00ff", at.as_str()),
        ("", "http://evil.example"),
    ] {
        let refused = http
            .post(format!("{at}/dead/{id}/drop"))
            .header("cookie", &cookie)
            .header("origin", origin)
            .header("content-type", FORM)
            .body(format!("csrf={csrf}"))
            .send()
            .await
            .unwrap();
        assert_eq!(
            refused.status(),
            StatusCode::FORBIDDEN,
            "csrf {csrf:?} from {origin}"
        );
        let said = refused.text().await.unwrap();
        assert!(
            said.contains("CSRF token") || said.contains("another site"),
            "{said}"
        );
    }
    assert_eq!(shop.dead().await, 1, "nothing dropped");
}

#[tokio::test]
async fn console_without_a_token_shows_everything_and_takes_no_action() {
    let shop = Shop::open().await;
    let (_console, at) = shop.console(None);
    let browser = Browser::start().await;

    browser.goto(&format!("{at}/?span=day")).await;
    browser
        .until_text("#over-time", |t| t.contains("The last day"))
        .await;
    browser.goto(&format!("{at}/?trace=order-7")).await;
    browser.until_shows("#outbox-dead", "1").await;
    let header = browser
        .until_text("header", |t| t.contains("read-only"))
        .await;
    assert!(header.contains("GUESTLIST_CONSOLE_TOKEN"), "{header}");
    browser
        .until_text("#trace-result", |t| t.contains("stored: status 201"))
        .await;
    let dead = browser
        .until_text("#dead-letters", |t| t.contains("evt_refused"))
        .await;
    assert!(dead.contains("no stream takes topic nowhere"), "{dead}");
    for form in ["#login", "form.retry", "form.drop", "form.evict"] {
        assert!(
            browser.all(form).await.is_empty(),
            "{form} on a read-only console"
        );
    }
    browser.quit().await;

    let id = shop.dead_letter_id().await;
    let refused = client()
        .post(format!("{at}/dead/{id}/retry"))
        .header("content-type", FORM)
        .body("csrf=")
        .send()
        .await
        .unwrap();
    assert_eq!(refused.status(), StatusCode::FORBIDDEN);
    let said = refused.text().await.unwrap();
    assert!(
        said.contains("read-only: start it with GUESTLIST_CONSOLE_TOKEN"),
        "{said}"
    );
    assert_eq!(shop.dead().await, 1);
}

/// Signing out ends the session for good: the signed-out cookie, with the CSRF token its forms
/// carried, drops nothing afterwards (before, a replayed cookie still acted: the session lived
/// as long as the process).
#[tokio::test]
async fn console_signing_out_ends_the_session_for_good() {
    let shop = Shop::open().await;
    let (_console, at) = shop.console(Some(TOKEN));
    let http = client();
    let (_, cookie) = sign_in(&http, &at).await;
    let page = page_of(&http, &at, &cookie).await;
    let csrf = value_after(&page, r#"name="csrf" value=""#);
    let signed_out = post_form(
        &http,
        format!("{at}/logout"),
        Some(&cookie),
        format!("csrf={csrf}"),
    )
    .await;
    assert_eq!(signed_out.status(), StatusCode::SEE_OTHER);
    assert!(
        signed_out.headers()["set-cookie"]
            .to_str()
            .unwrap()
            .contains("Max-Age=0")
    );
    let id = shop.dead_letter_id().await;
    let replayed = post_form(
        &http,
        format!("{at}/dead/{id}/drop"),
        Some(&cookie),
        format!("csrf={csrf}"),
    )
    .await;
    assert_eq!(replayed.status(), StatusCode::FORBIDDEN);
    let said = replayed.text().await.unwrap();
    assert!(said.contains("sign in first"), "{said}");
    assert_eq!(shop.dead().await, 1, "nothing dropped");
}

/// Every answer carries the same guarding headers: the page, its figures (`/live`), and the
/// refusal of a request to another name (421). Before, `/live` had no content security policy
/// and the 421 neither `X-Frame-Options` nor `nosniff`.
#[tokio::test]
async fn console_every_answer_carries_the_same_guarding_headers() {
    let shop = Shop::open().await;
    let (_console, at) = shop.console(Some(TOKEN));
    let http = client();
    for (path, host, status) in [
        ("/", None, StatusCode::OK),
        ("/live", None, StatusCode::OK),
        (
            "/",
            Some("rebound.example"),
            StatusCode::MISDIRECTED_REQUEST,
        ),
    ] {
        let mut request = http.get(format!("{at}{path}"));
        if let Some(host) = host {
            let port = at.rsplit(':').next().unwrap();
            request = request.header("host", format!("{host}:{port}"));
        }
        let answer = request.send().await.unwrap();
        assert_eq!(answer.status(), status, "{path} at {host:?}");
        let headers = answer.headers();
        for (name, value) in [
            ("x-frame-options", "DENY"),
            ("x-content-type-options", "nosniff"),
            ("cache-control", "no-store"),
        ] {
            assert_eq!(
                headers.get(name).and_then(|v| v.to_str().ok()),
                Some(value),
                "{name} on {path} at {host:?}"
            );
        }
        let policy = headers
            .get("content-security-policy")
            .and_then(|v| v.to_str().ok())
            .unwrap_or_default();
        assert!(
            policy.contains("default-src 'none'") && policy.contains("frame-ancestors 'none'"),
            "content-security-policy on {path} at {host:?}: {policy:?}"
        );
    }
}

/// A crafted link cannot put words in the page's result line: the line shows only under the
/// seal the console gave the action's own redirect, for the browser's own session. Before, the
/// link below rendered "key Your session expired: … evicted".
#[tokio::test]
async fn console_result_line_names_only_what_this_session_did() {
    let shop = Shop::open().await;
    let (_console, at) = shop.console(Some(TOKEN));
    let http = client();
    let crafted = "/?done=evicted&scope=client-shop&key=Your+session+expired%3A+re-enter+the+token+at+http%3A%2F%2Fevil.example";
    for seal in ["", "&seal=00ff", "&seal="] {
        let page = http
            .get(format!("{at}{crafted}{seal}"))
            .send()
            .await
            .unwrap()
            .text()
            .await
            .unwrap();
        assert!(
            !page.contains(r#"id="flash""#) && !page.contains("evicted:"),
            "a crafted link ({seal:?}) made the page say something"
        );
    }
    // A real action's redirect carries its seal, and the page shows its line.
    let (signed_in, cookie) = sign_in(&http, &at).await;
    let location = signed_in.headers()["location"].to_str().unwrap().to_owned();
    assert!(location.contains("seal="), "{location}");
    let page = |cookie: Option<String>| {
        let mut request = http.get(format!("{at}{location}"));
        if let Some(cookie) = cookie {
            request = request.header("cookie", cookie);
        }
        async move { request.send().await.unwrap().text().await.unwrap() }
    };
    assert!(
        page(Some(cookie))
            .await
            .contains("signed in: retry, drop and evict")
    );
    assert!(
        !page(None).await.contains(r#"id="flash""#),
        "another browser following the same address sees no line"
    );
}

/// Sign-in attempts are limited per client and in all, however many connections they come on:
/// twenty wrong tokens at once from one client get at most five tried (the rest 429 with
/// `Retry-After`), and three more clients' five each use up the minute's twenty, so that a
/// fifth client is refused at its first. Before, each request waited half a second on its own
/// and twenty connections tried forty tokens a second.
#[tokio::test]
async fn console_sign_in_attempts_are_limited_per_client_and_in_all() {
    let shop = Shop::open().await;
    let (_console, at) = shop.console(Some(TOKEN));
    let from = |n: u8| {
        reqwest::Client::builder()
            .redirect(reqwest::redirect::Policy::none())
            .local_address(std::net::IpAddr::from([127, 0, 0, n]))
            .build()
            .unwrap()
    };
    let attempt = |http: reqwest::Client| {
        let at = at.clone();
        async move {
            let wrong = "token=not-the-console-token-at-all".to_owned();
            let answer = post_form(&http, format!("{at}/login"), None, wrong).await;
            let retry_after = answer.headers().get("retry-after").cloned();
            (answer.status(), retry_after)
        }
    };
    let one = from(1);
    let answers = futures_util::future::join_all((0..20).map(|_| attempt(one.clone()))).await;
    let tried = answers
        .iter()
        .filter(|(status, _)| *status == StatusCode::SEE_OTHER)
        .count();
    let limited: Vec<_> = answers
        .iter()
        .filter(|(status, _)| *status == StatusCode::TOO_MANY_REQUESTS)
        .collect();
    assert_eq!(tried, 5, "five tried, one client: {answers:?}");
    assert_eq!(limited.len(), 15, "{answers:?}");
    assert!(limited.iter().all(|(_, retry_after)| retry_after.is_some()));
    // At once, so that the minute's twenty are not replenished meanwhile (one every 3 s).
    let others = (2..5).flat_map(|n| (0..5).map(move |_| n));
    let answers = futures_util::future::join_all(others.map(|n| attempt(from(n)))).await;
    assert!(
        answers
            .iter()
            .all(|(status, _)| *status == StatusCode::SEE_OTHER),
        "three more clients, five tries each: {answers:?}"
    );
    assert_eq!(
        attempt(from(5)).await.0,
        StatusCode::TOO_MANY_REQUESTS,
        "a new client past the twenty of all"
    );
}

/// Off loopback, the console starts only with a token or with the hosts it answers to: with
/// neither it refuses to start and says what to do; with `--allow-host` it answers to that name
/// and refuses any other with 421. Before, it answered any name, with no warning without a
/// token.
#[tokio::test]
async fn console_off_loopback_needs_a_token_or_its_hosts() {
    let shop = Shop::open().await;
    let refused = Command::new(env!("CARGO_BIN_EXE_guestlist"))
        .args(["console", "--database", &shop.url, "--listen", "0.0.0.0:0"])
        .env_remove("GUESTLIST_DATABASE_URL")
        .env_remove("GUESTLIST_CONSOLE_TOKEN")
        .output()
        .unwrap();
    assert!(!refused.status.success());
    let said = stderr(&refused);
    assert!(
        said.contains("off loopback") && said.contains("--allow-host"),
        "{said}"
    );
    let (_console, at) = shop.console_with(
        None,
        &["--listen", "0.0.0.0:0", "--allow-host", "console.example"],
    );
    let port = at.rsplit(':').next().unwrap().to_owned();
    let http = client();
    for (host, status) in [
        ("console.example", StatusCode::OK),
        ("elsewhere.example", StatusCode::MISDIRECTED_REQUEST),
    ] {
        let answer = http
            .get(format!("http://127.0.0.1:{port}/"))
            .header("host", format!("{host}:{port}"))
            .send()
            .await
            .unwrap();
        assert_eq!(answer.status(), status, "{host}");
    }
}

/// A 5 MB form sent whole before the answer is read gets the console's 413, not a broken pipe:
/// the console reads the body to its end before it refuses it. Before, it answered after 2 MB
/// and closed the connection under the client's write.
#[tokio::test]
async fn console_a_body_over_the_limit_gets_its_413_whole() {
    let shop = Shop::open().await;
    let (_console, at) = shop.console(Some(TOKEN));
    let body = format!("token={}", "a".repeat(5 * 1024 * 1024));
    let answer = client()
        .post(format!("{at}/login"))
        .header("content-type", FORM)
        .body(body)
        .send()
        .await
        .expect("an answer, not a broken pipe");
    assert_eq!(answer.status(), StatusCode::PAYLOAD_TOO_LARGE);
    let said = answer.text().await.unwrap();
    assert!(said.contains("at most 64 KiB"), "{said}");
}

/// A signed-in operator opens an outgoing dead letter's edit page from the console, changes its
/// body and headers and sends it back: it is pending again, edited, marked with the session's
/// label; a browser not signed in sees no body.
#[tokio::test]
async fn console_edits_an_outgoing_dead_letter_and_retries_it() {
    let shop = Shop::open().await;
    let (_console, at) = shop.console(Some(TOKEN));
    let id = shop.dead_letter_id().await;
    let http = client();
    let unsigned = http
        .get(format!("{at}/dead/{id}/edit"))
        .send()
        .await
        .unwrap();
    assert_eq!(unsigned.status(), 403, "no body shown without signing in");

    let browser = Browser::start().await;
    browser.goto(&format!("{at}/")).await;
    browser.type_into("#login input[name=token]", TOKEN).await;
    browser.press("#login button", "#flash", "signed in").await;
    browser.click(&format!("#dead-{id} a.edit")).await;
    let body = browser.until_text("#body", |_| true).await;
    assert_eq!(body, "{}", "the body as it was");
    browser
        .type_into("#headers", "content-type: application/json\nx-fixed: yes")
        .await;
    browser
        .type_into("#body", "{\"order\": 42,\n \"fixed\": true}")
        .await;
    let flash = browser.press("#save", "#flash", "edited").await;
    assert!(
        flash.contains(&format!(
            "dead letter {id} is back, edited, in guestlist_outbox"
        )),
        "{flash}"
    );
    browser.quit().await;
    let (payload, headers): (Vec<u8>, Vec<u8>) = guestlist::sqlx::query_as(
        "SELECT payload, headers FROM guestlist_outbox WHERE message_id = 'evt_refused'",
    )
    .fetch_one(&shop.pool)
    .await
    .unwrap();
    assert_eq!(payload, b"{\"order\": 42,\n \"fixed\": true}");
    let headers = String::from_utf8(headers).unwrap();
    assert!(
        headers.contains("content-type: application/json\r\n"),
        "{headers}"
    );
    assert!(headers.contains("x-fixed: yes\r\n"), "{headers}");
    assert!(
        headers.contains("guestlist-edited-by: console-"),
        "{headers}"
    );
    assert_eq!(shop.dead().await, 0, "no longer dead");
}

/// Outgoing dead letters refused alike form one failure group; the console retries it whole
/// only once the count it names is sent back: without it, or with a stale one, it asks again
/// and changes nothing.
#[tokio::test]
async fn console_retries_an_outgoing_failure_group_once_its_count_is_confirmed() {
    let shop = Shop::open().await;
    shop.enqueue("evt_refused_2", "nowhere").await;
    shop.relay().await;
    assert_eq!(shop.dead().await, 2);
    let (_console, at) = shop.console(Some(TOKEN));
    let http = client();
    let (_, cookie) = sign_in(&http, &at).await;
    let page = page_of(&http, &at, &cookie).await;
    let csrf = value_after(&page, r#"name="csrf" value=""#);
    let group = value_after(&page, r#"id="outgoing-group-"#);
    let retry = format!("{at}/outbox/group/{group}/retry");
    for body in [format!("csrf={csrf}"), format!("csrf={csrf}&confirm=1")] {
        let asked = post_form(&http, retry.clone(), Some(&cookie), body).await;
        assert_eq!(asked.status(), StatusCode::OK);
        let said = asked.text().await.unwrap();
        assert!(
            said.contains("holds <strong>2</strong> dead letters"),
            "{said}"
        );
        assert_eq!(
            shop.dead().await,
            2,
            "nothing retried before the count is confirmed"
        );
    }
    let done = post_form(
        &http,
        retry,
        Some(&cookie),
        format!("csrf={csrf}&confirm=2"),
    )
    .await;
    assert_eq!(done.status(), StatusCode::SEE_OTHER);
    assert_eq!(shop.dead().await, 0, "both back in the outbox");
    let back: i64 = guestlist::sqlx::query_scalar(
        "SELECT count(*) FROM guestlist_outbox WHERE message_id LIKE 'evt_refused%'",
    )
    .fetch_one(&shop.pool)
    .await
    .unwrap();
    assert_eq!(back, 2);
}
