//! The charts after an hour of traffic: the shop's tables hold an hour of claims, dead
//! letters, outbox rows and keys, written at their own minutes, and the console draws each
//! minute of it, its legends adding up to what the tables hold. The guide's picture of the
//! charts is this story's (`GUESTLIST_SCREENSHOT_CHARTS=path`).

use guestlist::sqlx::{self, SqlitePool};
use guestlist_testkit::webdriver::Browser;

use super::Shop;

/// How many messages a handler claims in the minute `m` minutes ago.
type PerMinute = fn(i64) -> i64;

/// The handlers of the hour, and how many messages each claims in each minute (1 to 59 ago).
const HANDLERS: [(&str, PerMinute); 3] = [
    // Steady, with a burst twenty minutes ago.
    ("warehouse", |m| {
        6 + if (18..=22).contains(&m) { 30 } else { 0 }
    }),
    // Quiet, then busier over the last quarter hour.
    ("billing", |m| if m < 15 { 10 } else { 2 }),
    // Every third minute.
    ("mailer", |m| i64::from(m % 3 == 0) * 4),
];

/// Runs `sql` once per row, with the row's id as `?1` and `-N minutes` (SQLite's `strftime`
/// modifier for its minute, N ago) as `?2`.
async fn seed(pool: &SqlitePool, sql: &str, rows: impl IntoIterator<Item = (String, i64)>) {
    let mut tx = pool.begin().await.unwrap();
    for (id, ago) in rows {
        sqlx::query(sqlx::AssertSqlSafe(sql.to_owned()))
            .bind(id)
            .bind(format!("-{ago} minutes"))
            .execute(&mut *tx)
            .await
            .unwrap();
    }
    tx.commit().await.unwrap();
}

/// What a chart's legend says of the line `name` that adds up to `total` over the hour.
fn legend(total: i64, name: &str) -> String {
    format!("{name} ({total} in the last hour)")
}

#[tokio::test]
async fn console_charts_draw_an_hour_of_traffic_minute_by_minute() {
    let shop = Shop::open().await;
    let pool = &shop.pool;
    let minutes = 1..60_i64;
    // Claims, at their minutes (the handled chart reads `seen_at`).
    let claims = HANDLERS.iter().flat_map(|(handler, per)| {
        minutes
            .clone()
            .flat_map(move |m| (0..per(m)).map(move |n| (format!("{handler}|evt_{m}_{n}"), m)))
    });
    seed(
        pool,
        "INSERT INTO guestlist_inbox (handler, message_id, seen_at) \
         SELECT substr(?1, 1, instr(?1, '|') - 1), substr(?1, instr(?1, '|') + 1), \
         strftime('%Y-%m-%d %H:%M:%f', 'now', ?2)",
        claims,
    )
    .await;
    // A handler that failed for a few minutes: five dead letters a minute, 30 to 34 ago.
    let dead = (30..35).flat_map(|m| (0..5).map(move |n| (format!("evt_dead_{m}_{n}"), m)));
    seed(
        pool,
        "INSERT INTO guestlist_inbox_dead (handler, message_id, reason, deliveries, dead_at) \
         VALUES ('billing', ?1, 'failed on delivery 5 of 5: card declined', 5, \
         CAST(strftime('%s', 'now', ?2) AS INTEGER) * 1000)",
        dead,
    )
    .await;
    // The outbox: written each minute, published a minute later (a relay that keeps them).
    let written = minutes
        .clone()
        .flat_map(|m| (0..8).map(move |n| (format!("evt_out_{m}_{n}"), m)));
    seed(
        pool,
        "INSERT INTO guestlist_outbox (message_id, topic, seq, payload, created_at, published_at) \
         VALUES (?1, 'orders.paid', 0, x'7b7d', strftime('%Y-%m-%d %H:%M:%f', 'now', ?2), \
         strftime('%Y-%m-%d %H:%M:%f', 'now', ?2, '+30 seconds'))",
        written,
    )
    .await;
    // Keys taken, busier in the half hour the burst came in.
    let keys = minutes
        .clone()
        .flat_map(|m| (0..(3 + i64::from(m < 30) * 3)).map(move |n| (format!("k-{m}-{n}"), m)));
    seed(
        pool,
        "INSERT INTO guestlist_keys (scope, idempotency_key, fingerprint, status, body, token, \
         created_at) VALUES ('client-shop', ?1, x'00', 201, x'', 1, \
         strftime('%Y-%m-%d %H:%M:%f', 'now', ?2))",
        keys,
    )
    .await;

    let (_console, at) = shop.console(None);
    let browser = Browser::start().await;
    browser.goto(&format!("{at}/")).await;
    for (handler, per) in HANDLERS {
        // Shop::open claimed one message for the warehouse, this minute.
        let total: i64 = minutes.clone().map(per).sum::<i64>() + i64::from(handler == "warehouse");
        browser
            .until_text("#chart-handled", |t| t.contains(&legend(total, handler)))
            .await;
    }
    browser
        .until_text("#chart-dead-lettered", |t| {
            t.contains(&legend(25, "billing"))
        })
        .await;
    // And the message Shop::open left pending (its other one moved to the dead letters).
    let written = 8 * 59 + 1;
    let drawn = browser
        .until_text("#chart-outbox-activity", |t| t.contains("in the last hour"))
        .await;
    assert!(
        drawn.contains(&legend(written, "written")) && drawn.contains(&legend(8 * 59, "published")),
        "{drawn}"
    );
    let taken: i64 = minutes
        .clone()
        .map(|m| 3 + i64::from(m < 30) * 3)
        .sum::<i64>()
        + 2;
    browser
        .until_text("#chart-keys-taken", |t| t.contains(&legend(taken, "taken")))
        .await;
    // Each line has a point for every minute of the hour.
    let points = browser
        .until_attribute("#chart-handled polyline[data-series=warehouse]", "points")
        .await;
    assert_eq!(points.split_whitespace().count(), 61, "{points}");
    let shot = browser.element_screenshot("#counted").await;
    assert!(shot.starts_with(b"\x89PNG"), "a PNG");
    if let Some(path) = std::env::var_os("GUESTLIST_SCREENSHOT_CHARTS") {
        std::fs::write(path, &shot).unwrap();
    }
    browser.quit().await;
}
