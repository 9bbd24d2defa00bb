//! A batch's steps journaled together (`Inbox::process_steps_batch`) on every backend: each
//! message's steps run once, a message whose step fails is the only one to fail, and its next
//! run resumes after what the batch committed. Effects are counted at each place.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use guestlist_sqlx::{MessageId, ProcessError, Stepped, Steps};
use guestlist_testkit::Fixture;
use tokio::sync::Notify;

use super::harness::{Harness, handler};
use super::steps::says_taken_over;
use super::steps_changed_hands::handle_plainly_once_entered;

/// Calls an external step made, by message and step.
#[derive(Default)]
struct Calls(Mutex<HashMap<(String, &'static str), u64>>);

impl Calls {
    fn call(&self, id: &MessageId, step: &'static str) -> String {
        let mut calls = self.0.lock().unwrap();
        let n = calls.entry((id.to_string(), step)).or_default();
        *n += 1;
        format!("{step}:{id}:{n}")
    }

    fn of(&self, id: &MessageId, step: &'static str) -> u64 {
        let calls = self.0.lock().unwrap();
        calls.get(&(id.to_string(), step)).copied().unwrap_or(0)
    }
}

/// Three steps: charge (external), pick (a pick task, in the database), email (external, which
/// fails for the ids in `bouncing`); the final work sets the order to PICKING.
async fn three_steps<DB: Fixture>(
    h: &Harness<DB>,
    steps: &mut Steps<DB>,
    id: &MessageId,
    calls: &Calls,
    bouncing: &Mutex<Vec<MessageId>>,
) -> anyhow::Result<String> {
    let charge: String = steps
        .external("charge", || async {
            Ok::<_, anyhow::Error>(calls.call(id, "charge"))
        })
        .await?;
    let pick = h.pick_sql(id).split("; ").nth(1).unwrap().to_owned();
    steps
        .database("pick", async |tx| DB::exec(tx, pick).await.map(drop))
        .await?;
    steps
        .external("email", || async {
            anyhow::ensure!(
                !bouncing.lock().unwrap().contains(id),
                "the address bounces"
            );
            Ok::<_, anyhow::Error>(calls.call(id, "email"))
        })
        .await?;
    Ok(charge)
}

/// Eight messages in one batch: each runs its three steps once and commits; the same batch
/// again is eight duplicates that run nothing. One message whose email bounces fails alone,
/// keeps its charge and its pick task, and its next run (in the next batch) resumes at the
/// email: no second charge, no second pick task.
pub async fn a_batchs_steps_journaled_together_run_once_and_fail_alone<DB: Fixture>(name: &str) {
    let h = Harness::<DB>::new(name).await;
    let warehouse = handler("warehouse");
    let ids: Vec<MessageId> = (0..8)
        .map(|n| MessageId::new(format!("evt_b{n}")).unwrap())
        .collect();
    let calls = Calls::default();
    let bouncing = Mutex::new(vec![ids[3].clone()]);
    let picked = format!(
        "UPDATE {} SET status = 'PICKING' WHERE id = {}",
        h.orders(),
        super::harness::ORDER
    );
    let run = async || {
        let runs = ids.iter().map(|id| {
            let (h, calls, bouncing, picked) = (&h, &calls, &bouncing, picked.clone());
            (
                id.clone(),
                async move |steps: &mut Steps<DB>| three_steps(h, steps, id, calls, bouncing).await,
                async move |tx: &mut DB::Connection, charge: String| {
                    DB::exec(tx, picked).await?;
                    Ok::<_, anyhow::Error>(charge)
                },
            )
        });
        h.inbox.process_steps_batch(&h.pool, &warehouse, runs).await
    };
    let first = run().await;
    for (n, (id, done)) in ids.iter().zip(&first).enumerate() {
        if n == 3 {
            assert!(
                matches!(done, Err(ProcessError::Handler(e)) if e.to_string().contains("email")),
                "{id}: {done:?}"
            );
        } else {
            let expected = format!("charge:{id}:1");
            assert!(
                matches!(done, Ok(Stepped::Ran(c)) if *c == expected),
                "{id}: {done:?}"
            );
        }
        assert_eq!(calls.of(id, "charge"), 1, "{id}: one charge");
        assert_eq!(h.picks_for(id).await, 1, "{id}: one pick task");
    }
    assert_eq!(h.inbox_rows().await, 7, "seven handled");
    bouncing.lock().unwrap().clear();
    let second = run().await;
    for (n, (id, done)) in ids.iter().zip(&second).enumerate() {
        if n == 3 {
            let expected = format!("charge:{id}:1");
            assert!(
                matches!(done, Ok(Stepped::Ran(c)) if *c == expected),
                "{id}: resumed, the charge replayed: {done:?}"
            );
            assert_eq!(calls.of(id, "email"), 1, "{id}: the email ran now");
        } else {
            assert!(matches!(done, Ok(Stepped::Duplicate)), "{id}: {done:?}");
        }
        assert_eq!(calls.of(id, "charge"), 1, "{id}: still one charge");
        assert_eq!(h.picks_for(id).await, 1, "{id}: still one pick task");
    }
    let journal = format!("SELECT count(*) FROM {}_steps", h.inbox.table());
    assert_eq!(
        h.scalar(journal).await,
        0,
        "every journal went with its commit"
    );
    assert_eq!(h.inbox_rows().await, 8);
}

/// A database step that fails for one message of a batch rolls back to its savepoint: the
/// others' writes on the shared transaction commit, and its own next run resumes there.
pub async fn a_failed_database_step_in_a_batch_rolls_back_alone<DB: Fixture>(name: &str) {
    let h = Harness::<DB>::new(name).await;
    let warehouse = handler("warehouse");
    let ids: Vec<MessageId> = (0..4)
        .map(|n| MessageId::new(format!("evt_d{n}")).unwrap())
        .collect();
    let broken = ids[1].clone();
    let runs = ids.iter().map(|id| {
        let pick = h.pick_sql(id).split("; ").nth(1).unwrap().to_owned();
        let sql = if *id == broken {
            // Writes a pick task, then fails: the write must not stay.
            format!("{pick}; INSERT INTO no_such_table_here VALUES (1)")
        } else {
            pick
        };
        (
            id.clone(),
            async move |steps: &mut Steps<DB>| {
                steps
                    .database("pick", async |tx| DB::exec(tx, sql).await.map(drop))
                    .await?;
                Ok::<_, anyhow::Error>(())
            },
            async |_tx: &mut DB::Connection, ()| Ok::<_, anyhow::Error>(()),
        )
    });
    let first = h.inbox.process_steps_batch(&h.pool, &warehouse, runs).await;
    for (id, done) in ids.iter().zip(&first) {
        if *id == broken {
            assert!(
                matches!(done, Err(ProcessError::Handler(_))),
                "{id}: {done:?}"
            );
            assert_eq!(h.picks_for(id).await, 0, "{id}: its write rolled back");
        } else {
            assert!(matches!(done, Ok(Stepped::Ran(()))), "{id}: {done:?}");
            assert_eq!(h.picks_for(id).await, 1, "{id}: one pick task");
        }
    }
}

/// A database step whose future is dropped mid-write (its handler timed out inside it) leaves
/// its write on the batch's shared transaction without its journal row: that transaction must
/// not commit. The batch's other parts on it fail with it (and resume), and in the end every
/// message has its pick task exactly once, the cut one included.
pub async fn a_database_step_cut_mid_write_in_a_batch_commits_nothing_of_it<DB: Fixture>(
    name: &str,
) {
    let h = Harness::<DB>::new(name).await;
    let warehouse = handler("warehouse");
    let ids: Vec<MessageId> = (0..4)
        .map(|n| MessageId::new(format!("evt_c{n}")).unwrap())
        .collect();
    let cut = ids[2].clone();
    // Leases short enough that the second round takes over the runs the first left held (their
    // give-backs may ride the transaction the cut part poisoned).
    let inbox = h.inbox.clone().step_lease(Duration::from_millis(300));
    for round in 0..2 {
        if round == 1 {
            tokio::time::sleep(Duration::from_millis(400)).await;
        }
        let runs = ids.iter().map(|id| {
            let pick = h.pick_sql(id).split("; ").nth(1).unwrap().to_owned();
            let hangs = round == 0 && *id == cut;
            (
                id.clone(),
                async move |steps: &mut Steps<DB>| {
                    let step = steps.database("pick", async |tx| {
                        DB::exec(tx, pick).await?;
                        if hangs {
                            tokio::time::sleep(Duration::from_secs(30)).await;
                        }
                        Ok::<_, anyhow::Error>(())
                    });
                    // Only the cut run is timed out: the others may take their time (a loaded
                    // MariaDB in CI took longer than 200 ms for one).
                    let limit = if hangs { 200 } else { 30_000 };
                    match tokio::time::timeout(Duration::from_millis(limit), step).await {
                        Ok(done) => done?,
                        Err(_) => anyhow::bail!("the handler timed out inside its step"),
                    }
                    Ok::<_, anyhow::Error>(())
                },
                async |_tx: &mut DB::Connection, ()| Ok::<_, anyhow::Error>(()),
            )
        });
        let done = inbox.process_steps_batch(&h.pool, &warehouse, runs).await;
        if round == 0 {
            assert!(
                matches!(done[2], Err(ProcessError::Handler(_))),
                "{:?}",
                done[2]
            );
            assert_eq!(h.picks_for(&cut).await, 0, "the cut write did not commit");
        } else {
            for (id, done) in ids.iter().zip(&done) {
                // A part the cut one's transaction did not take down (on a loaded machine it may
                // have committed on a transaction of its own) is a duplicate now; the cut one runs.
                let resumed = matches!(done, Ok(Stepped::Ran(())))
                    || (*id != cut && matches!(done, Ok(Stepped::Duplicate)));
                assert!(resumed, "{id}: {done:?}");
            }
        }
    }
    for id in &ids {
        assert_eq!(h.picks_for(id).await, 1, "{id}: one pick task");
    }
}

/// A run of a batch stalls past its lease (in its external call, and where the database has row
/// locks also inside its database step, after its write), and another consumer's run takes the
/// message over and finishes it. The batch's guards and journal rows are written together just
/// before the shared commit: the stale run's guard fails there, so its journal row (and its
/// write) never commit, and it is told [`Error::RunTakenOver`]. Effects counted: the message
/// has one pick task and one final commit, the other messages of the batch too once their
/// batch runs again (a part that shared the stale run's transaction rolled back with it).
pub async fn a_run_of_a_batch_taken_over_commits_nothing<DB: Fixture>(name: &str) {
    let places: &[&str] = if DB::ROW_LOCKS {
        &["external", "database"]
    } else {
        &["external"]
    };
    for &place in places {
        a_run_of_a_batch_taken_over_in::<DB>(&format!("{name}_{place}"), place == "database").await;
    }
}

async fn a_run_of_a_batch_taken_over_in<DB: Fixture>(name: &str, in_database: bool) {
    const LEASE: Duration = Duration::from_secs(2);
    let h = Harness::<DB>::new(name).await;
    let inbox = h.inbox.clone().step_lease(LEASE);
    let warehouse = handler("warehouse");
    let ids: Vec<MessageId> = (0..3)
        .map(|n| MessageId::new(format!("evt_t{n}")).unwrap())
        .collect();
    let stale = ids[1].clone();
    let (entered, release) = (Arc::new(Notify::new()), Arc::new(Notify::new()));
    let calls = Calls::default();

    let batch = async |stall: bool| {
        let runs = ids.iter().map(|id| {
            let pick = h.pick_sql(id).split("; ").nth(1).unwrap().to_owned();
            let stalls = stall && *id == stale;
            let (entered, release, calls) = (entered.clone(), release.clone(), &calls);
            (
                id.clone(),
                async move |steps: &mut Steps<DB>| {
                    let wait = async || {
                        if stalls {
                            entered.notify_one();
                            release.notified().await;
                        }
                    };
                    steps
                        .external("charge", || async {
                            if !in_database {
                                wait().await;
                            }
                            Ok::<_, anyhow::Error>(calls.call(id, "charge"))
                        })
                        .await?;
                    steps
                        .database("pick", async |tx| {
                            DB::exec(tx, pick).await?;
                            if in_database {
                                wait().await;
                            }
                            Ok::<_, anyhow::Error>(())
                        })
                        .await?;
                    Ok::<_, anyhow::Error>(())
                },
                async |_tx: &mut DB::Connection, ()| Ok::<_, anyhow::Error>(()),
            )
        });
        inbox.process_steps_batch(&h.pool, &warehouse, runs).await
    };
    // Another consumer's delivery of the stale message once the stale run's lease lapsed: it
    // takes the run over, charges (its own call), picks and commits.
    let take_over = async {
        tokio::time::timeout(Duration::from_secs(10), entered.notified())
            .await
            .expect("the stale run reaches its stall");
        tokio::time::sleep(LEASE + Duration::from_millis(300)).await;
        let pick = h.pick_sql(&stale).split("; ").nth(1).unwrap().to_owned();
        let done = inbox
            .process_steps(
                &h.pool,
                &warehouse,
                &stale,
                async |steps| {
                    steps
                        .external("charge", || async {
                            Ok::<_, anyhow::Error>(calls.call(&stale, "charge"))
                        })
                        .await?;
                    steps
                        .database("pick", async |tx| DB::exec(tx, pick).await.map(drop))
                        .await?;
                    Ok::<_, anyhow::Error>(())
                },
                async |_tx, ()| Ok::<_, anyhow::Error>(()),
            )
            .await;
        release.notify_one();
        done
    };
    let (first, taken_over) = tokio::join!(batch(true), take_over);
    assert!(
        matches!(taken_over, Ok(Stepped::Ran(()))),
        "{}: the take-over: {taken_over:?}",
        DB::LABEL
    );
    let Err(ProcessError::Handler(err)) = &first[1] else {
        panic!("{}: the stale run: {:?}", DB::LABEL, first[1]);
    };
    assert!(says_taken_over(err), "{}: {err:#}", DB::LABEL);
    assert_eq!(
        h.picks_for(&stale).await,
        1,
        "{}: the stale run's pick did not commit",
        DB::LABEL
    );
    // The others ran, or rolled back with the stale run's part and run again now.
    each_handled_once(&h, &ids, &batch(false).await).await;
}

/// A message of a batch is handled by other means (a plain `Inbox::process` of the same
/// handler, as during a move from one to the other) while its run is mid-steps. The inbox's
/// claim goes with the batch's writes just before the shared commit: it finds the message
/// handled, the transaction rolls back, and the run's final work never commits. Effects
/// counted: one pick task for that message (the other consumer's), one for the other message
/// of the batch once its batch runs again.
pub async fn a_message_handled_elsewhere_mid_steps_commits_no_final_work<DB: Fixture>(name: &str) {
    let h = Harness::<DB>::new(name).await;
    let warehouse = handler("warehouse");
    let ids: Vec<MessageId> = (0..2)
        .map(|n| MessageId::new(format!("evt_e{n}")).unwrap())
        .collect();
    let elsewhere = ids[0].clone();
    let (entered, release) = (Arc::new(Notify::new()), Arc::new(Notify::new()));
    let batch = async |stall: bool| {
        let runs = ids.iter().map(|id| {
            let pick = h.pick_sql(id).split("; ").nth(1).unwrap().to_owned();
            let stalls = stall && *id == elsewhere;
            let (entered, release) = (entered.clone(), release.clone());
            (
                id.clone(),
                async move |steps: &mut Steps<DB>| {
                    let charge: String = steps
                        .external("charge", || async {
                            if stalls {
                                entered.notify_one();
                                release.notified().await;
                            }
                            Ok::<_, anyhow::Error>(format!("ch_{id}"))
                        })
                        .await?;
                    Ok::<_, anyhow::Error>(charge)
                },
                async move |tx: &mut DB::Connection, _charge: String| {
                    DB::exec(tx, pick).await?;
                    Ok::<_, anyhow::Error>(())
                },
            )
        });
        h.inbox.process_steps_batch(&h.pool, &warehouse, runs).await
    };
    let meanwhile = handle_plainly_once_entered(&h, &warehouse, &elsewhere, &entered, &release);
    let (first, ()) = tokio::join!(batch(true), meanwhile);
    assert!(
        matches!(first[0], Ok(Stepped::Duplicate)),
        "{}: {:?}",
        DB::LABEL,
        first[0]
    );
    assert_eq!(
        h.picks_for(&elsewhere).await,
        1,
        "{}: the batch's final work did not commit",
        DB::LABEL
    );
    each_handled_once(&h, &ids, &batch(false).await).await;
}

/// A run of a batch whose steps take a while keeps its message: each step's commit renews its
/// lease once a tenth of it has passed (before that it only locks the run's row). With a lease
/// of two seconds and steps of 1.4 s, a delivery of the message to another consumer 2.4 s in,
/// past the first lease's end, finds it held, not free to take over; the run then finishes, and
/// its effects count once.
pub async fn a_slow_run_of_a_batch_keeps_its_lease_renewed<DB: Fixture>(name: &str) {
    const LEASE: Duration = Duration::from_secs(2);
    let h = Harness::<DB>::new(name).await;
    let inbox = h.inbox.clone().step_lease(LEASE);
    let warehouse = handler("warehouse");
    let event = MessageId::new("evt_slow").unwrap();
    let calls = Calls::default();
    let slow_call = async |step: &'static str| {
        tokio::time::sleep(Duration::from_millis(1400)).await;
        Ok::<_, anyhow::Error>(calls.call(&event, step))
    };
    let runs = [(
        event.clone(),
        async |steps: &mut Steps<DB>| {
            let _: String = steps.external("charge", || slow_call("charge")).await?;
            let _: String = steps.external("email", || slow_call("email")).await?;
            Ok::<_, anyhow::Error>(())
        },
        async |_tx: &mut DB::Connection, ()| Ok::<_, anyhow::Error>(()),
    )];
    let meanwhile = async {
        tokio::time::sleep(Duration::from_millis(2400)).await;
        inbox
            .process_steps(
                &h.pool,
                &warehouse,
                &event,
                async |steps| {
                    let _: String = steps
                        .external("charge", || async {
                            Ok::<_, anyhow::Error>(calls.call(&event, "charge"))
                        })
                        .await?;
                    Ok::<_, anyhow::Error>(())
                },
                async |_tx, ()| Ok::<_, anyhow::Error>(()),
            )
            .await
    };
    let (batch, other) = tokio::join!(
        inbox.process_steps_batch(&h.pool, &warehouse, runs),
        meanwhile
    );
    assert!(
        matches!(other, Ok(Stepped::InFlight { .. })),
        "{}: the other delivery, 2.4 s in: {other:?}",
        DB::LABEL
    );
    assert!(
        matches!(batch[0], Ok(Stepped::Ran(()))),
        "{}: {:?}",
        DB::LABEL,
        batch[0]
    );
    assert_eq!(calls.of(&event, "charge"), 1, "{}: one charge", DB::LABEL);
    assert_eq!(h.inbox_rows().await, 1, "{}", DB::LABEL);
}

/// After a batch's second run (`again`), each of `ids` ran or was handled already, with one
/// pick task, and the inbox holds them all.
async fn each_handled_once<DB: Fixture, E: std::fmt::Debug>(
    h: &Harness<DB>,
    ids: &[MessageId],
    again: &[Result<Stepped<()>, E>],
) {
    for (id, done) in ids.iter().zip(again) {
        assert!(
            matches!(done, Ok(Stepped::Ran(()) | Stepped::Duplicate)),
            "{}: {id}: {done:?}",
            DB::LABEL
        );
        assert_eq!(
            h.picks_for(id).await,
            1,
            "{}: {id}: one pick task",
            DB::LABEL
        );
    }
    assert_eq!(h.inbox_rows().await, ids.len() as i64, "{}", DB::LABEL);
}
