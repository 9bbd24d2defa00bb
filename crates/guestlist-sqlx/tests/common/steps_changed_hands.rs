//! A run of one message's steps (`Inbox::process_steps`) whose message changes hands while it
//! runs: taken over by another run while it is mid-write, or handled by other means. Its guard
//! goes with its database step's journal row, and with its final commit's claim, after the
//! work, so either fails there and nothing of the run commits.

use std::sync::Arc;
use std::time::Duration;

use guestlist_sqlx::{Error, HandlerName, MessageId, ProcessError, Stepped, Steps};
use guestlist_testkit::Fixture;
use tokio::sync::Notify;

use super::harness::{Harness, handler};
use super::steps::{journal_rows, says_taken_over};

/// Where the stale run stalls.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Stall {
    /// Inside its database step, after its write.
    InStep,
    /// Inside its final work, after its write.
    InFinal,
    /// In an external call after its database step was journaled.
    AfterStep,
}

/// A run stalls past its lease (where the database has row locks: inside its database step
/// after its write, and inside its final work after its write; elsewhere a stalled write holds
/// the whole database, so in an external call after its database step), and another delivery
/// takes the message over and finishes it. The stale run is told [`Error::RunTakenOver`] once
/// released, and nothing it wrote commits. Effects counted: one
/// pick task, one inbox row, no journal left.
pub async fn a_run_taken_over_mid_write_commits_nothing<DB: Fixture>(name: &str) {
    let stalls: &[Stall] = if DB::ROW_LOCKS {
        &[Stall::InStep, Stall::InFinal]
    } else {
        &[Stall::AfterStep]
    };
    for &stall in stalls {
        taken_over::<DB>(&format!("{name}_{stall:?}").to_lowercase(), stall).await;
    }
}

async fn taken_over<DB: Fixture>(name: &str, stall: Stall) {
    const LEASE: Duration = Duration::from_secs(2);
    let h = Harness::<DB>::new(name).await;
    let inbox = h.inbox.clone().step_lease(LEASE);
    let (warehouse, event) = (
        handler("warehouse"),
        MessageId::new("evt_mid_write").unwrap(),
    );
    let pick = h.pick_sql(&event).split("; ").nth(1).unwrap().to_owned();
    let (entered, release) = (Arc::new(Notify::new()), Arc::new(Notify::new()));
    let wait = async || {
        entered.notify_one();
        release.notified().await;
    };

    // The message's steps: a pick task in the database step, or in the final work.
    let work = async |steps: &mut Steps<DB>, stalls: bool| {
        if stall != Stall::InFinal {
            steps
                .database("pick", async |tx| {
                    DB::exec(tx, pick.clone()).await?;
                    if stalls && stall == Stall::InStep {
                        wait().await;
                    }
                    Ok::<_, anyhow::Error>(())
                })
                .await?;
        }
        steps
            .external("notify", || async {
                if stalls && stall == Stall::AfterStep {
                    wait().await;
                }
                Ok::<_, anyhow::Error>(())
            })
            .await?;
        Ok::<_, anyhow::Error>(())
    };
    let finish = async |tx: &mut DB::Connection, stalls: bool| {
        if stall == Stall::InFinal {
            DB::exec(tx, pick.clone()).await?;
            if stalls {
                wait().await;
            }
        }
        Ok::<_, anyhow::Error>(())
    };
    let stale = inbox.process_steps(
        &h.pool,
        &warehouse,
        &event,
        async |steps| work(steps, true).await,
        async |tx, ()| finish(tx, true).await,
    );
    // Another consumer's delivery once the stale run's lease lapsed: it takes the run over,
    // and picks (or replays the pick the stale run journaled) and commits.
    let take_over = async {
        tokio::time::timeout(Duration::from_secs(10), entered.notified())
            .await
            .expect("the stale run reaches its stall");
        tokio::time::sleep(LEASE + Duration::from_millis(300)).await;
        let done = inbox
            .process_steps(
                &h.pool,
                &warehouse,
                &event,
                async |steps| work(steps, false).await,
                async |tx, ()| finish(tx, false).await,
            )
            .await;
        release.notify_one();
        done
    };
    let (stale, taken_over) = tokio::join!(stale, take_over);
    assert!(
        matches!(taken_over, Ok(Stepped::Ran(()))),
        "{} {stall:?}: the take-over: {taken_over:?}",
        DB::LABEL
    );
    // Told by its step (through its work), or by its final commit.
    let told = match stale {
        Err(ProcessError::Handler(ref err)) => says_taken_over(err),
        Err(ProcessError::Store(ref err)) => matches!(err, Error::RunTakenOver { .. }),
        ref other => panic!("{} {stall:?}: the stale run: {other:?}", DB::LABEL),
    };
    assert!(told, "{} {stall:?}: the stale run: {stale:?}", DB::LABEL);
    assert_eq!(
        h.picks_for(&event).await,
        1,
        "{} {stall:?}: one pick task",
        DB::LABEL
    );
    assert_eq!(h.inbox_rows().await, 1, "{} {stall:?}", DB::LABEL);
    assert_eq!(
        journal_rows(&h, &event).await,
        0,
        "{} {stall:?}: the journal went",
        DB::LABEL
    );
}

/// The message is handled by other means (a plain `Inbox::process` of the same handler, as
/// during a move from one to the other) while its run is in its external call. The run's final
/// work runs, then the inbox's claim finds the message handled: the transaction rolls back and
/// the message is a duplicate. Effects counted: one pick task (the plain process's).
pub async fn a_message_handled_elsewhere_mid_steps_alone_commits_no_final_work<DB: Fixture>(
    name: &str,
) {
    let h = Harness::<DB>::new(name).await;
    let (warehouse, event) = (
        handler("warehouse"),
        MessageId::new("evt_elsewhere").unwrap(),
    );
    let pick = h.pick_sql(&event).split("; ").nth(1).unwrap().to_owned();
    let (entered, release) = (Arc::new(Notify::new()), Arc::new(Notify::new()));
    let steps = h.inbox.process_steps(
        &h.pool,
        &warehouse,
        &event,
        async |steps| {
            steps
                .external("charge", || async {
                    entered.notify_one();
                    release.notified().await;
                    Ok::<_, anyhow::Error>("ch_1".to_owned())
                })
                .await
                .map_err(anyhow::Error::from)
        },
        async |tx, _charge| {
            DB::exec(tx, pick.clone()).await?;
            Ok::<_, anyhow::Error>(())
        },
    );
    let meanwhile = handle_plainly_once_entered(&h, &warehouse, &event, &entered, &release);
    let (stepped, ()) = tokio::join!(steps, meanwhile);
    assert!(
        matches!(stepped, Ok(Stepped::Duplicate)),
        "{}: {stepped:?}",
        DB::LABEL
    );
    assert_eq!(
        h.picks_for(&event).await,
        1,
        "{}: the run's final work did not commit",
        DB::LABEL
    );
    assert_eq!(h.inbox_rows().await, 1, "{}", DB::LABEL);
}

/// Once a run of `event`'s steps reached its stall (`entered`), handles `event` by other means,
/// a plain `Inbox::process` of the same handler writing its pick task, then lets the run go on
/// (`release`).
pub async fn handle_plainly_once_entered<DB: Fixture>(
    h: &Harness<DB>,
    warehouse: &HandlerName,
    event: &MessageId,
    entered: &Notify,
    release: &Notify,
) {
    tokio::time::timeout(Duration::from_secs(10), entered.notified())
        .await
        .expect("the run reaches its call");
    let pick = h.pick_sql(event);
    let done = h
        .inbox
        .process(&h.pool, warehouse, event, async |tx| {
            DB::exec(tx, pick.clone()).await
        })
        .await;
    release.notify_one();
    assert!(done.unwrap().ran(), "{}: the plain process ran", DB::LABEL);
}
