//! The purge, running beside the traffic as a service runs it (`Purger`, through the database
//! link's proxy, so that it meets the same faults), with retentions short enough that a run
//! of minutes purges: the tables stay bounded, and nothing it deletes is still needed.

use std::time::Duration;

use guestlist::retention::PurgerHandle;
use guestlist::sqlx::{PgPool, Postgres};
use guestlist::{Inbox, Purger, Retention, SqlKeyStore};

/// How long handled messages are kept: past the longest a copy of one can still come. That is
/// not the broker's redelivery alone: a relay that published a message and could not stamp it
/// (its database or broker out, its lease lost) publishes it again when it can, and on SQS
/// (moto, which deduplicates only against messages still in the queue) the new copy reaches
/// the warehouse. Kept 60 s, SQS runs handled 59 orders twice, their copies arriving 70 to
/// 77 s after the first (seed 301). Nor is it the relay alone: on Kafka a record comes again
/// until its partition's commit lands, which needs a group whose members stay; under the
/// nemesis's broker faults the Kafka hour (seed 602) read records again 5 to 8 minutes after
/// they were handled, past the 5 minutes kept then. 20 minutes here; an hour's run still purges.
pub const INBOX_KEEP: Duration = Duration::from_secs(20 * 60);
/// How long the shop's keys are kept: far past the longest a client retries one key.
pub const KEYS_KEEP: Duration = Duration::from_secs(120);
/// How long payments' keys are kept: past the longest the warehouse may come back to one
/// event's charge, which is its consumer's whole retry horizon (deferrals for up to an hour,
/// failures with backoff up to a minute each). Kept 120 s, a 15-minute RabbitMQ run charged
/// 416 orders of 26,448 two to four times (seed 401): events whose warehouse transaction kept
/// failing after the charge came back to payments after their key was gone.
pub const PAYMENTS_KEYS_KEEP: Duration = Duration::from_secs(2 * 3600);
/// Time between purges.
pub const EVERY: Duration = Duration::from_secs(10);

/// The purgers of the warehouse's inbox and of the shop's and payments' keys.
pub fn start(pool: &PgPool) -> Vec<PurgerHandle> {
    let retention = |keep| Retention::new(keep, keep).expect("a retention");
    let keys = |table| SqlKeyStore::with_table(pool.clone(), table).expect("a key table");
    let inbox = Inbox::<Postgres>::with_table("warehouse_inbox").expect("the inbox");
    vec![
        Purger::new(pool.clone(), &inbox, retention(INBOX_KEEP))
            .every(EVERY)
            .spawn(),
        Purger::new(pool.clone(), &keys("warehouse_keys"), retention(KEYS_KEEP))
            .every(EVERY)
            .spawn(),
        Purger::new(
            pool.clone(),
            &keys("payments_keys"),
            retention(PAYMENTS_KEYS_KEEP),
        )
        .every(EVERY)
        .spawn(),
    ]
}

/// Rows the purge should have deleted by now (older than their retention and two turns), per
/// table: none, when it keeps up.
pub async fn behind(pool: &PgPool) -> Vec<String> {
    let late = |keep: Duration| (keep + 2 * EVERY).as_secs();
    let mut found = Vec::new();
    for (table, at, keep) in [
        ("warehouse_inbox", "seen_at", INBOX_KEEP),
        ("warehouse_keys", "created_at", KEYS_KEEP),
        ("payments_keys", "created_at", PAYMENTS_KEYS_KEEP),
    ] {
        let sql = format!(
            "SELECT count(*) FROM {table} WHERE {at} < now() - interval '{} seconds'",
            late(keep)
        );
        let n: i64 = guestlist::sqlx::query_scalar(guestlist::sqlx::AssertSqlSafe(sql))
            .fetch_one(pool)
            .await
            .expect("count what the purge left");
        if n > 0 {
            found.push(format!(
                "{n} rows of {table} older than {} s: the purge fell behind",
                late(keep)
            ));
        }
    }
    found
}
