//! The steps stories, each over a real broker and PostgreSQL, counting effects at every
//! downstream: payments' charges (and the requests that reached it), reservations, emails,
//! orders.

use std::process::Command;
use std::time::{Duration, Instant};

use sqlx::Postgres;

use super::downstream::Downstream;
use super::warehouse::{POINTS, Tables};
use super::{BATCH, EMAIL, LEASE, PAUSE_MS, PAYMENTS, TOGETHER};
use crate::brokers::child::Running;
use crate::brokers::{Broker, Rig};

/// A story's broker, database, tables and downstreams.
pub(super) struct Stage<B: Broker> {
    pub(super) rig: Rig<B, Postgres>,
    pub(super) tables: Tables,
    pub(super) downstream: Downstream,
    pub(super) name: String,
}

impl<B: Broker> Stage<B> {
    pub(super) async fn open(name: &str) -> Self {
        let rig = Rig::<B, Postgres>::open(name, LEASE).await;
        let tables = Tables::of(&rig.tag);
        let handled = format!("handled_{}", rig.tag);
        for table in [
            &tables.reservations,
            &tables.orders,
            &tables.points,
            &handled,
        ] {
            rig.db.exec(format!("DROP TABLE IF EXISTS {table}")).await;
        }
        for create in [
            format!("CREATE TABLE {} (event TEXT NOT NULL)", tables.reservations),
            format!(
                "CREATE TABLE {} (event TEXT NOT NULL, charge TEXT NOT NULL)",
                tables.orders
            ),
            format!(
                "CREATE TABLE {} (event TEXT NOT NULL, point TEXT NOT NULL, PRIMARY KEY (event, point))",
                tables.points
            ),
            format!(
                "CREATE TABLE {handled} (fresh BIGINT, duplicates BIGINT, deferred BIGINT, failed BIGINT)"
            ),
        ] {
            rig.db.exec(create).await;
        }
        let downstream = Downstream::start(&rig.db, &rig.tag).await;
        Self {
            rig,
            tables,
            downstream,
            name: name.to_owned(),
        }
    }

    /// Publishes event `id`, stopping its first run at `stop_at`, its charge `slow_ms` late.
    async fn publish(&self, id: &str, stop_at: Option<&str>, slow_ms: u64) {
        let body = serde_json::json!({ "id": id, "stop_at": stop_at, "slow_ms": slow_ms });
        self.rig.broker.publish(body.to_string().as_bytes()).await;
    }

    /// Publishes event `id`, whose email step fails every time (poison).
    async fn publish_bouncing(&self, id: &str) {
        let body = serde_json::json!({ "id": id, "bounces": true });
        self.rig.broker.publish(body.to_string().as_bytes()).await;
    }

    /// A consumer process, pausing (instead of hanging) at its stop points when `pause` says.
    fn consumer(&self, batch: usize, pause: Option<Duration>) -> Running {
        self.consumer_with(batch, pause, false)
    }

    /// A consumer process, its batches side by side where `together` says.
    fn consumer_with(&self, batch: usize, pause: Option<Duration>, together: bool) -> Running {
        let mut env = vec![
            (TOGETHER, together.to_string()),
            (PAYMENTS, self.downstream.payments.clone()),
            (EMAIL, self.downstream.email.clone()),
            (BATCH, batch.to_string()),
        ];
        if let Some(pause) = pause {
            env.push((PAUSE_MS, pause.as_millis().to_string()));
        }
        Running(self.rig.child(&self.name, "steps_consumer", &env))
    }

    pub(super) async fn count(&self, table: &str, event: Option<&str>) -> i64 {
        let filter = event.map_or(String::new(), |e| format!(" WHERE event = '{e}'"));
        self.rig
            .db
            .scalar(format!("SELECT count(*) FROM {table}{filter}"))
            .await
    }

    /// Rows left in the inbox's steps journal (run rows included).
    async fn journal(&self) -> i64 {
        self.count(&format!("{}_steps", self.rig.inbox.table()), None)
            .await
    }

    /// Waits (at most `limit`) until `orders` orders are written and nothing is outstanding.
    async fn until_done(&self, orders: i64, limit: Duration) {
        self.rig
            .until(limit, &format!("{orders} orders are written"), || async {
                self.count(&self.tables.orders, None).await == orders
                    && self.rig.broker.drained().await
            })
            .await;
    }

    /// Stops `consumers` with SIGTERM and returns the sum of what they handled.
    async fn stop(&self, consumers: Vec<Running>) -> Handled {
        for mut consumer in consumers {
            let pid = consumer.0.id().to_string();
            assert!(
                Command::new("kill")
                    .args(["-TERM", &pid])
                    .status()
                    .unwrap()
                    .success()
            );
            let status = tokio::task::spawn_blocking(move || consumer.0.wait().unwrap())
                .await
                .unwrap();
            assert!(status.success(), "SIGTERM is a clean stop: {status}");
        }
        let sum = |column: &str| {
            format!(
                "SELECT COALESCE(SUM({column}), 0)::BIGINT FROM handled_{}",
                self.rig.tag
            )
        };
        Handled {
            fresh: self.rig.db.scalar(sum("fresh")).await,
            deferred: self.rig.db.scalar(sum("deferred")).await,
            failed: self.rig.db.scalar(sum("failed")).await,
        }
    }
}

/// What the consumer processes of a story handled, summed.
#[derive(Debug)]
struct Handled {
    fresh: i64,
    deferred: i64,
    failed: i64,
}

/// A consumer process SIGKILLed at each step boundary (before the charge, after it and before
/// its journal, after its journal, inside the reserve step, after it, after the email, inside
/// the final commit) resumes after the last step it finished: a finished step never runs
/// again, a step cut mid-call runs once more (once in all at payments, which keeps keys), and
/// the database step's rows exist exactly once.
pub async fn a_run_killed_at_each_step_boundary_resumes_after_its_last_finished_step<B: Broker>(
    name: &str,
) {
    killed_at_each_step_boundary::<B>(name, 1, false).await;
}

/// The same, with the consumer's batches side by side (`Consumer::steps_together`, batches of
/// ten): every message of a batch runs at once, each stops at its point in the first batch, and
/// the kills redeliver the batch. Each resumes after its own last committed step: one charge
/// at payments, one reservation and one order each. (A run stopped inside its part of the
/// shared transaction holds the others' journals back, so a kill cuts them between a call and
/// its journal: calls are at least once there, exactly once where the downstream keeps keys.)
pub async fn a_batch_side_by_side_killed_at_step_boundaries_resumes_each_message<B: Broker>(
    name: &str,
) {
    killed_at_each_step_boundary::<B>(name, 10, true).await;
}

/// Publishes one event per stop point and one without, and kills the consumer (batches of
/// `batch`, side by side where `together`) each time a run reaches a new stop point.
async fn killed_at_each_step_boundary<B: Broker>(name: &str, batch: usize, together: bool) {
    let stage = Stage::<B>::open(name).await;
    let mut events: Vec<(String, Option<&str>)> = POINTS
        .iter()
        .enumerate()
        .map(|(n, point)| (format!("evt_{n}"), Some(*point)))
        .collect();
    events.push(("evt_plain".to_owned(), None));
    for (event, point) in &events {
        stage.publish(event, *point, 0).await;
    }
    // One message in hand at a time (but side by side): a kill then redelivers only the message
    // it cut, and no message rides several kills into its delivery limit.
    let consumer_of = || stage.consumer_with(batch, None, together);
    let mut consumer = consumer_of();
    let mut kills = 0;
    let deadline = Instant::now() + Duration::from_secs(180);
    loop {
        if stage.count(&stage.tables.points, None).await > kills {
            consumer.0.kill().expect("SIGKILL the consumer");
            consumer.0.wait().unwrap();
            kills = stage.count(&stage.tables.points, None).await;
            consumer = consumer_of();
            continue;
        }
        if stage.count(&stage.tables.orders, None).await == events.len() as i64 {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "{}: after {kills} kills, {} of {} orders written",
            B::LABEL,
            stage.count(&stage.tables.orders, None).await,
            events.len()
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    stage
        .until_done(events.len() as i64, Duration::from_secs(60))
        .await;
    let handled = stage.stop(vec![consumer]).await;
    assert_eq!(kills, POINTS.len() as i64, "a run stopped at every point");
    for (event, point) in &events {
        let point = point.unwrap_or("none");
        let at = format!("{} {event} (killed at {point})", B::LABEL);
        let requests = stage.downstream.charge_requests(event);
        // Cut after payments answered and before the journal, the charge is asked again, and
        // payments answers it from its keys: two requests, one charge.
        let asked = if point == "charge:called" { 2 } else { 1 };
        if together {
            // Side by side, a run stopped inside its part of the shared transaction holds the
            // others' journals back: a kill then cuts them between their call and its journal,
            // and they call again with the same key (payments answers from its keys).
            assert!(!requests.is_empty(), "{at}: requests at payments");
        } else {
            assert_eq!(requests.len(), asked, "{at}: requests at payments");
        }
        let key = format!("warehouse:{event}/charge");
        assert!(
            requests.iter().all(|r| r.key.as_deref() == Some(&*key)),
            "{at}: every charge carries {key}: {requests:?}"
        );
        assert_eq!(
            stage.count(&stage.downstream.charges, Some(event)).await,
            1,
            "{at}: charges"
        );
        assert_eq!(
            stage.count(&stage.tables.reservations, Some(event)).await,
            1,
            "{at}: reservations (a database step, exactly once)"
        );
        // The sink keeps no keys: an email cut after the call and before its journal goes twice.
        let emails = if point == "email:called" { 2 } else { 1 };
        if together {
            // At least once: the sink keeps no keys, and a kill can cut any email's journal.
            assert!(stage.downstream.emails(event) >= 1, "{at}: emails");
        } else {
            assert_eq!(stage.downstream.emails(event), emails, "{at}: emails");
        }
        assert_eq!(
            stage.count(&stage.tables.orders, Some(event)).await,
            1,
            "{at}: orders"
        );
    }
    assert_eq!(
        stage.journal().await,
        0,
        "every journal went with its final commit"
    );
    assert_eq!(
        handled.failed, 0,
        "no failures after the kills: {handled:?}"
    );
}

/// Two consumer processes take both copies of each event at once: one run of its steps, the
/// other a "not yet" (deferred, never a failure) that comes back as a duplicate.
pub async fn two_deliveries_of_one_message_at_once_run_its_steps_once<B: Broker>(name: &str) {
    let stage = Stage::<B>::open(name).await;
    let consumers = vec![stage.consumer(1, None), stage.consumer(1, None)];
    let events: Vec<String> = (0..8).map(|n| format!("evt_{n}")).collect();
    for event in &events {
        // Both copies adjacent, and the charge slow enough that they overlap.
        stage.publish(event, None, 300).await;
        stage.publish(event, None, 300).await;
    }
    stage
        .until_done(events.len() as i64, Duration::from_secs(120))
        .await;
    let handled = stage.stop(consumers).await;
    for event in &events {
        let at = format!("{} {event}", B::LABEL);
        assert_eq!(
            stage.downstream.charge_requests(event).len(),
            1,
            "{at}: one charge request"
        );
        assert_eq!(
            stage.count(&stage.downstream.charges, Some(event)).await,
            1,
            "{at}: charges"
        );
        assert_eq!(
            stage.count(&stage.tables.reservations, Some(event)).await,
            1,
            "{at}: reservations"
        );
        assert_eq!(stage.downstream.emails(event), 1, "{at}: emails");
    }
    assert_eq!(
        handled.fresh,
        events.len() as i64,
        "one run per event: {handled:?}"
    );
    assert!(
        handled.deferred >= 1,
        "a copy found the other run holding its event, and was deferred: {handled:?}"
    );
    assert_eq!(handled.failed, 0, "never a failure: {handled:?}");
    assert_eq!(stage.journal().await, 0);
}

/// A consumer process SIGSTOPped after its charge returned, past its lease: another process
/// takes the run over and finishes it; resumed, the stopped run journals and commits nothing
/// (no second reservation, no second email).
pub async fn a_run_stopped_past_its_lease_journals_and_commits_nothing_once_resumed<B: Broker>(
    name: &str,
) {
    let stage = Stage::<B>::open(name).await;
    stage.publish("evt_stop", Some("charge:called"), 0).await;
    let pause = LEASE * 2;
    let stopped = stage.consumer(10, Some(pause));
    stage
        .rig
        .until(
            Duration::from_secs(30),
            "the run reaches its stop point",
            || async { stage.count(&stage.tables.points, None).await == 1 },
        )
        .await;
    let pid = stopped.0.id().to_string();
    assert!(
        Command::new("kill")
            .args(["-STOP", &pid])
            .status()
            .unwrap()
            .success()
    );
    let other = stage.consumer(10, None);
    stage
        .rig
        .until(
            Duration::from_secs(60),
            "the other process finishes the order",
            || async { stage.count(&stage.tables.orders, None).await == 1 },
        )
        .await;
    assert!(
        Command::new("kill")
            .args(["-CONT", &pid])
            .status()
            .unwrap()
            .success()
    );
    stage
        .rig
        .until(
            Duration::from_secs(30),
            "the stopped run resumes",
            || async { stage.count(&stage.tables.points, None).await == 2 },
        )
        .await;
    stage.until_done(1, Duration::from_secs(60)).await;
    // What the resumed run could still do, it has tried by the time its message is settled.
    let handled = stage.stop(vec![stopped, other]).await;
    let event = "evt_stop";
    assert_eq!(
        stage.downstream.charge_requests(event).len(),
        2,
        "both runs asked payments"
    );
    assert_eq!(
        stage.count(&stage.downstream.charges, Some(event)).await,
        1,
        "one charge"
    );
    assert_eq!(
        stage.count(&stage.tables.reservations, Some(event)).await,
        1,
        "the stale run reserved nothing"
    );
    assert_eq!(
        stage.downstream.emails(event),
        1,
        "the stale run emailed nothing"
    );
    assert_eq!(stage.count(&stage.tables.orders, Some(event)).await, 1);
    assert_eq!(handled.fresh, 1, "{handled:?}");
    assert_eq!(
        handled.failed, 0,
        "a run taken over is withdrawn, never a failure: {handled:?}"
    );
    assert_eq!(stage.journal().await, 0);
}

/// A message whose third step fails every time is dead-lettered at the delivery limit, its
/// reason naming the step; the steps it finished ran once (payments asked once, one
/// reservation), and their journal stays for a retry to resume after them. The messages
/// behind it flow.
pub async fn a_poison_step_is_dead_lettered_by_name_its_finished_steps_kept<B: Broker>(name: &str) {
    let stage = Stage::<B>::open(name).await;
    stage.publish_bouncing("evt_bounce").await;
    stage.publish("evt_after", None, 0).await;
    let consumer = stage.consumer(1, None);
    stage
        .rig
        .until(
            Duration::from_secs(60),
            "the bouncing event is dead-lettered",
            || async { !stage.rig.broker.dead_letters().await.is_empty() },
        )
        .await;
    stage.until_done(1, Duration::from_secs(60)).await;
    let handled = stage.stop(vec![consumer]).await;
    let reason = stage
        .rig
        .db
        .scalar(format!(
            "SELECT count(*) FROM {}_dead WHERE message_id = 'evt_bounce' \
             AND reason LIKE '%step \"email\" failed: the address bounces%'",
            stage.rig.inbox.table()
        ))
        .await;
    assert_eq!(reason, 1, "the dead letter names the failed step");
    let event = "evt_bounce";
    assert_eq!(
        stage.downstream.charge_requests(event).len(),
        1,
        "charged once, replayed after"
    );
    assert_eq!(
        stage.count(&stage.tables.reservations, Some(event)).await,
        1
    );
    assert_eq!(stage.downstream.emails(event), 0);
    assert_eq!(stage.count(&stage.tables.orders, Some(event)).await, 0);
    let journaled = stage
        .rig
        .db
        .scalar(format!(
            "SELECT count(*) FROM {}_steps WHERE message_id = '{event}' AND place > 0",
            stage.rig.inbox.table()
        ))
        .await;
    assert_eq!(
        journaled, 2,
        "charge and reserve stay journaled for a retry"
    );
    assert_eq!(
        stage.count(&stage.tables.orders, Some("evt_after")).await,
        1,
        "the rest flow"
    );
    assert!(
        handled.failed >= 4,
        "each run of the poison counted: {handled:?}"
    );
}
