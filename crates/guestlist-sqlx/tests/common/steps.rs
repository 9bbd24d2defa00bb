//! Steps (`Inbox::process_steps`) on every backend: a run cut after two steps resumes after
//! them, a renamed step stops with both names, and a run past its lease is taken over and
//! journals nothing more. Effects are counted at each place: the external call, the database
//! step's rows, the final work.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use guestlist_sqlx::{Error, MessageId, ProcessError, Seen, Stepped, Steps};
use guestlist_testkit::Fixture;
use tokio::sync::Notify;

use super::harness::{Harness, ORDER, handler};

/// A payments service as the external step sees it: it counts its calls and the carried keys.
#[derive(Clone, Default)]
struct Payments {
    calls: Arc<AtomicU64>,
    keys: Arc<std::sync::Mutex<Vec<String>>>,
}

impl Payments {
    /// Charges the order: a new charge id per call, the carried key recorded.
    fn charge(&self) -> anyhow::Result<String> {
        let key = guestlist_carry::key_for("charge")?;
        self.keys.lock().unwrap().push(key.as_str().to_owned());
        let n = self.calls.fetch_add(1, Ordering::SeqCst) + 1;
        Ok(format!("ch_{n}"))
    }

    fn calls(&self) -> u64 {
        self.calls.load(Ordering::SeqCst)
    }
}

/// Whether `err` says another run took the message over.
pub fn says_taken_over(err: &anyhow::Error) -> bool {
    err.chain().any(|cause| {
        matches!(
            cause.downcast_ref::<Error>(),
            Some(Error::RunTakenOver { .. })
        )
    })
}

/// The warehouse's steps: charge (external), reserve (a pick task, in the database).
async fn charge_and_reserve<DB: Fixture>(
    steps: &mut Steps<DB>,
    payments: &Payments,
    reserve_sql: &str,
) -> anyhow::Result<String> {
    let charge: String = steps
        .external("charge", || async { payments.charge() })
        .await?;
    steps
        .database("reserve", async |tx| {
            DB::exec(tx, reserve_sql.to_owned()).await.map(drop)
        })
        .await?;
    Ok(charge)
}

/// The final work: the order is picked, with the charge on it.
fn picked_sql<DB: Fixture>(h: &Harness<DB>) -> String {
    format!(
        "UPDATE {} SET status = 'PICKING' WHERE id = {ORDER}",
        h.orders()
    )
}

/// Rows the message has in the steps table.
pub async fn journal_rows<DB: Fixture>(h: &Harness<DB>, id: &MessageId) -> i64 {
    h.scalar(format!(
        "SELECT count(*) FROM {}_steps WHERE message_id = '{id}'",
        h.inbox.table()
    ))
    .await
}

/// A run that dies after its two steps (its work fails before the final commit) leaves them
/// journaled; the redelivery returns the charge's result without calling payments again and
/// does not reserve twice, then commits the final work; a third delivery is a duplicate, and
/// the journal is gone.
pub async fn a_run_cut_after_two_steps_resumes_after_them<DB: Fixture>(name: &str) {
    let h = Harness::<DB>::new(name).await;
    let (warehouse, event) = (handler("warehouse"), MessageId::new("evt_steps").unwrap());
    let payments = Payments::default();
    let reserve = h.pick_sql(&event).split("; ").nth(1).unwrap().to_owned();
    let picked = picked_sql(&h);

    let cut = h
        .inbox
        .process_steps(
            &h.pool,
            &warehouse,
            &event,
            async |steps| {
                charge_and_reserve(steps, &payments, &reserve).await?;
                anyhow::bail!("the process dies before its final work")
            },
            async |_tx, ()| Ok::<_, anyhow::Error>(()),
        )
        .await;
    assert!(matches!(cut, Err(ProcessError::Handler(_))), "{cut:?}");
    assert_eq!((payments.calls(), h.picks_for(&event).await), (1, 1));
    assert_eq!(journal_rows(&h, &event).await, 3, "the run and two steps");
    // What an operator's `guestlist history evt_steps` reads: two steps done, the run stopped.
    let history = guestlist_sqlx::History::<DB>::with_tables(
        h.inbox.table().clone(),
        guestlist_sqlx::TableName::new("no_outbox_here").unwrap(),
        guestlist_sqlx::TableName::new("no_keys_here").unwrap(),
    );
    let found = history.find(&h.pool, event.as_str()).await.unwrap();
    let seen: Vec<String> = found
        .sightings
        .iter()
        .map(|s| match &s.seen {
            Seen::StepDone {
                place,
                step,
                result_bytes,
                ..
            } => {
                format!("{place} {step} {result_bytes}")
            }
            Seen::StepsRun {
                lease_left_ms,
                steps_done,
                ..
            } => {
                format!("run {steps_done} ended:{}", *lease_left_ms <= 0)
            }
            other => format!("{other:?}"),
        })
        .collect();
    assert_eq!(
        seen,
        ["1 charge 6", "2 reserve 4", "run 2 ended:true"],
        "{}",
        DB::LABEL
    );

    for delivery in 0..2 {
        let done = h
            .inbox
            .process_steps(
                &h.pool,
                &warehouse,
                &event,
                async |steps| charge_and_reserve(steps, &payments, &reserve).await,
                async |tx, charge| {
                    DB::exec(tx, picked.clone()).await?;
                    Ok::<_, anyhow::Error>(charge)
                },
            )
            .await
            .unwrap();
        let expected = if delivery == 0 {
            Stepped::Ran("ch_1".to_owned())
        } else {
            Stepped::Duplicate
        };
        assert_eq!(done, expected, "{}: delivery {delivery}", DB::LABEL);
    }
    assert_eq!(payments.calls(), 1, "{}: charged once", DB::LABEL);
    assert_eq!(h.picks_for(&event).await, 1, "{}: reserved once", DB::LABEL);
    assert_eq!(h.inbox_rows().await, 1, "{}", DB::LABEL);
    assert_eq!(
        journal_rows(&h, &event).await,
        0,
        "{}: journal gone",
        DB::LABEL
    );
    let status = h
        .scalar(format!(
            "SELECT count(*) FROM {} WHERE status = 'PICKING'",
            h.orders()
        ))
        .await;
    assert_eq!(status, 1, "{}: the final work committed", DB::LABEL);
    assert_eq!(
        *payments.keys.lock().unwrap(),
        ["warehouse:evt_steps/charge"],
        "{}: the call carried its step's key",
        DB::LABEL
    );
}

/// A redelivery whose handler asks for another step where the journal holds `charge` (the step
/// renamed between two runs) stops with an error naming both, and runs nothing.
pub async fn a_renamed_step_stops_with_both_names<DB: Fixture>(name: &str) {
    let h = Harness::<DB>::new(name).await;
    let (warehouse, event) = (handler("warehouse"), MessageId::new("evt_renamed").unwrap());
    let payments = Payments::default();
    let first = h
        .inbox
        .process_steps(
            &h.pool,
            &warehouse,
            &event,
            async |steps| {
                steps
                    .external("charge", || async { payments.charge() })
                    .await?;
                anyhow::bail!("the process dies after its first step")
            },
            async |_tx, ()| Ok::<_, anyhow::Error>(()),
        )
        .await;
    assert!(first.is_err());
    let renamed = h
        .inbox
        .process_steps(
            &h.pool,
            &warehouse,
            &event,
            async |steps| {
                let paid: String = steps
                    .external("pay", || async { payments.charge() })
                    .await?;
                Ok::<_, anyhow::Error>(paid)
            },
            async |_tx, paid| Ok::<_, anyhow::Error>(paid),
        )
        .await;
    let Err(ProcessError::Handler(err)) = renamed else {
        panic!("{}: {renamed:?}", DB::LABEL);
    };
    let changed = err
        .chain()
        .find_map(|cause| cause.downcast_ref::<Error>())
        .unwrap_or_else(|| panic!("{}: {err:#}", DB::LABEL));
    assert!(
        matches!(changed, Error::StepChanged { journaled, asked, place: 0, .. }
            if journaled == "charge" && asked == "pay"),
        "{}: {changed:?}",
        DB::LABEL
    );
    assert!(changed.to_string().contains("renamed"), "{changed}");
    assert_eq!(payments.calls(), 1, "{}: nothing ran again", DB::LABEL);
    assert_eq!(h.inbox_rows().await, 0, "{}", DB::LABEL);
}

/// Run A stalls inside its external step past its lease. A delivery meanwhile is told "not
/// yet"; once the lease ended, run C takes the message over and finishes it. Released, A's
/// journal is refused: it reserved nothing and committed nothing (its call ran: at least once
/// for a call, which the carried key makes once downstream).
pub async fn a_run_past_its_lease_is_taken_over_and_journals_nothing<DB: Fixture>(name: &str) {
    // Long enough that the delivery meanwhile comes within it on a loaded machine: 400 ms
    // lapsed before it on MariaDB beside a soak on two cores, and the take-over ran early.
    const LEASE: Duration = Duration::from_secs(2);
    let h = Harness::<DB>::new(name).await;
    let inbox = h.inbox.clone().step_lease(LEASE);
    let (warehouse, event) = (handler("warehouse"), MessageId::new("evt_stalled").unwrap());
    let payments = Payments::default();
    let reserve = h.pick_sql(&event).split("; ").nth(1).unwrap().to_owned();
    let (entered, release) = (Arc::new(Notify::new()), Arc::new(Notify::new()));

    let stalled = tokio::spawn({
        let (inbox, pool, warehouse, event) = (
            inbox.clone(),
            h.pool.clone(),
            warehouse.clone(),
            event.clone(),
        );
        let (payments, reserve) = (payments.clone(), reserve.clone());
        let (entered, release) = (entered.clone(), release.clone());
        async move {
            inbox
                .process_steps(
                    &pool,
                    &warehouse,
                    &event,
                    async |steps| {
                        steps
                            .external("charge", || async {
                                entered.notify_one();
                                release.notified().await;
                                payments.charge()
                            })
                            .await?;
                        steps
                            .database("reserve", async |tx| {
                                DB::exec(tx, reserve.clone()).await.map(drop)
                            })
                            .await?;
                        Ok::<_, anyhow::Error>(())
                    },
                    async |_tx, ()| Ok::<_, anyhow::Error>(()),
                )
                .await
        }
    });
    tokio::time::timeout(Duration::from_secs(10), entered.notified())
        .await
        .expect("run A reaches its call");

    // A delivery of the message to another consumer, whose run charges, reserves and finishes.
    let deliver = async || {
        inbox
            .process_steps(
                &h.pool,
                &warehouse,
                &event,
                async |steps| charge_and_reserve(steps, &payments, &reserve).await,
                async |_tx, charge| Ok::<_, anyhow::Error>(charge),
            )
            .await
            .unwrap()
    };
    let meanwhile = deliver().await;
    assert!(
        matches!(meanwhile, Stepped::InFlight { retry_after } if retry_after <= LEASE + Duration::from_secs(1)),
        "{}: {meanwhile:?}",
        DB::LABEL
    );

    tokio::time::sleep(LEASE + Duration::from_millis(300)).await;
    let taken_over = deliver().await;
    assert_eq!(taken_over, Stepped::Ran("ch_1".to_owned()), "{}", DB::LABEL);

    release.notify_one();
    let stale = stalled.await.unwrap();
    let Err(ProcessError::Handler(err)) = stale else {
        panic!("{}: the stale run: {stale:?}", DB::LABEL);
    };
    assert!(says_taken_over(&err), "{}: {err:#}", DB::LABEL);
    assert_eq!(payments.calls(), 2, "{}: both runs called", DB::LABEL);
    assert_eq!(h.picks_for(&event).await, 1, "{}: reserved once", DB::LABEL);
    assert_eq!(h.inbox_rows().await, 1, "{}", DB::LABEL);
    assert_eq!(journal_rows(&h, &event).await, 0, "{}", DB::LABEL);
}

/// The purge forgets the run and journal of a message left mid-steps (its work failed after a
/// step, and nothing finished it), and of a handled message whose journal was kept, once its
/// run was last touched longer ago than the retention, in the inbox's own purge; a journal
/// touched since stays.
pub async fn a_journal_left_mid_steps_is_purged_after_the_retention<DB: Fixture>(name: &str) {
    let h = Harness::<DB>::new(name).await;
    let warehouse = handler("warehouse");
    let payments = Payments::default();
    let (stale, fresh) = (
        MessageId::new("evt_given_up").unwrap(),
        MessageId::new("evt_mid_steps").unwrap(),
    );
    for event in [&stale, &fresh] {
        let cut = h
            .inbox
            .process_steps(
                &h.pool,
                &warehouse,
                event,
                async |steps| {
                    steps
                        .external("charge", || async { payments.charge() })
                        .await?;
                    anyhow::bail!("the order has no lines")
                },
                async |_tx, ()| Ok::<_, anyhow::Error>(()),
            )
            .await;
        assert!(matches!(cut, Err(ProcessError::Handler(_))), "{cut:?}");
        assert_eq!(journal_rows(&h, event).await, 2, "the run and its step");
    }
    // Kept by choice: a handled message's journal stays, a duplicate leaves it be.
    let (keeping, kept) = (
        h.inbox.clone().keep_journals(true),
        MessageId::new("evt_kept").unwrap(),
    );
    for expected in [Stepped::Ran(()), Stepped::Duplicate] {
        let done = keeping
            .process_steps(
                &h.pool,
                &warehouse,
                &kept,
                async |steps| {
                    let _: String = steps
                        .external("charge", || async { payments.charge() })
                        .await?;
                    Ok::<_, anyhow::Error>(())
                },
                async |_tx, ()| Ok::<_, anyhow::Error>(()),
            )
            .await
            .unwrap();
        assert_eq!(done, expected, "{}", DB::LABEL);
        assert_eq!(journal_rows(&h, &kept).await, 2, "{}: kept", DB::LABEL);
    }
    // What an operator's console lists: the two left mid-steps, not the handled one.
    let mut mid: Vec<(String, u32, Option<String>, bool)> = h
        .inbox
        .mid_steps(&h.pool, 10)
        .await
        .unwrap()
        .into_iter()
        .map(|m| {
            (
                m.message_id,
                m.steps_done,
                m.last_step,
                m.stalled_for.is_some(),
            )
        })
        .collect();
    mid.sort();
    let charged = Some("charge".to_owned());
    assert_eq!(
        mid,
        [
            ("evt_given_up".to_owned(), 1, charged.clone(), true),
            ("evt_mid_steps".to_owned(), 1, charged, true),
        ],
        "{}",
        DB::LABEL
    );
    // Two days ago, as the journal's clock counts it (Unix milliseconds).
    h.exec(format!(
        "UPDATE {}_steps SET lease_until = lease_until - 172800000 \
         WHERE message_id IN ('{stale}', '{kept}')",
        h.inbox.table()
    ))
    .await;
    let day =
        guestlist_sqlx::Retention::new(Duration::from_secs(86_400), Duration::from_secs(86_400))
            .unwrap();
    assert_eq!(
        h.inbox.purge(day).count(&h.pool).await.unwrap(),
        4,
        "{}: the stale journals' rows",
        DB::LABEL
    );
    let purged = h.inbox.purge(day).run(&h.pool).await.unwrap();
    assert_eq!(purged, guestlist_sqlx::Purged::Deleted(4), "{}", DB::LABEL);
    assert_eq!(
        journal_rows(&h, &stale).await,
        0,
        "{}: forgotten",
        DB::LABEL
    );
    assert_eq!(journal_rows(&h, &kept).await, 0, "{}: forgotten", DB::LABEL);
    assert_eq!(journal_rows(&h, &fresh).await, 2, "{}: kept", DB::LABEL);
}
