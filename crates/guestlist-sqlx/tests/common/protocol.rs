//! The key table's statements against the protocol's functions (`guestlist_core::protocol`), the
//! ones the model check runs: for every kind of row (held by the attempt or by a later one,
//! answered or not, its lease running or ended), each write (complete, release, take-over) does
//! on the database exactly what the function says it may.

use std::time::Duration;

use guestlist_core::protocol::{KeyLeaseRow, KeyRowView, Settlement, settle};
use guestlist_sqlx::{
    Attempt, Completed, Fingerprint, IdempotencyKey, KeyClaim, KeyStore, Scope, SqlKeyStore,
    StoredBody, StoredResponse,
};
use guestlist_testkit::Fixture;

use super::harness::Harness;

/// A write a cell tries, by an attempt that holds the row's token or not.
#[derive(Debug, Clone, Copy)]
enum Write {
    Complete,
    Release,
    TakeOver,
}

pub async fn the_key_statements_do_what_the_protocol_allows<DB: Fixture>(name: &str) {
    let h = Harness::<DB>::new(name).await;
    let keys = SqlKeyStore::with_table(h.pool.clone(), &format!("keys_{}", h.tag)).unwrap();
    h.exec(format!("DROP TABLE IF EXISTS {}", keys.table()))
        .await;
    keys.migrate().await.unwrap();
    let scope = Scope::new("all").unwrap();
    let fingerprint = Fingerprint::builder("POST", "/charges").body(b"{}");
    let response = StoredResponse {
        status: 201,
        headers: vec![],
        body: StoredBody::Bytes(b"{}".to_vec()),
    };
    let mut cells = 0;
    for answered in [false, true] {
        for lease_ended in [false, true] {
            for own_token in [true, false] {
                for write in [Write::Complete, Write::Release, Write::TakeOver] {
                    cells += 1;
                    let key = IdempotencyKey::new(format!("cell{cells}")).unwrap();
                    // A lease of 1 ms has ended by the time the write comes; one of a minute has not.
                    let lease = if lease_ended {
                        Duration::from_millis(1)
                    } else {
                        Duration::from_secs(60)
                    };
                    let KeyClaim::Run { attempt } =
                        keys.claim(&scope, &key, &fingerprint, lease).await.unwrap()
                    else {
                        panic!("a new key runs");
                    };
                    if answered {
                        let stored = keys.complete(&scope, &key, attempt, &response).await;
                        assert_eq!(stored.unwrap(), Completed::Stored);
                    }
                    tokio::time::sleep(Duration::from_millis(20)).await;
                    let row = KeyLeaseRow {
                        token: attempt.token(),
                        answered,
                        // On the protocol's clock: 0 is now; the lease ended before or runs on.
                        lease_until: if lease_ended { -1 } else { 60_000 },
                    };
                    let writer = if own_token {
                        attempt
                    } else {
                        Attempt::new(2, attempt.token().wrapping_add(1))
                    };
                    let cell = format!(
                        "{} answered={answered} lease_ended={lease_ended} own_token={own_token} {write:?}",
                        DB::LABEL
                    );
                    match write {
                        Write::Complete => {
                            let done = keys.complete(&scope, &key, writer, &response).await;
                            let stored = done.unwrap() == Completed::Stored;
                            assert_eq!(stored, row.may_complete(writer.token()), "{cell}");
                        }
                        Write::Release => {
                            let gone = keys.release(&scope, &key, writer).await.unwrap();
                            assert_eq!(gone, row.may_release(writer.token()), "{cell}");
                        }
                        Write::TakeOver => {
                            // A claim reads the row's own token: the take-over's compare-and-set
                            // is on what it read, so only the row's state decides.
                            if !own_token {
                                continue;
                            }
                            let view = KeyRowView {
                                same_request: true,
                                answered,
                                lease_left_ms: row.lease_until,
                            };
                            let expected = match settle(view, Some(())) {
                                Settlement::TakeOver(()) => {
                                    assert!(row.may_take_over(attempt.token(), 0), "{cell}");
                                    "run"
                                }
                                Settlement::Replay => "replay",
                                Settlement::InFlight { .. } => "in flight",
                                Settlement::Mismatch => "mismatch",
                            };
                            let began = keys.claim(&scope, &key, &fingerprint, lease).await;
                            let found = match began.unwrap() {
                                KeyClaim::Run { attempt: next } => {
                                    assert_ne!(next.token(), attempt.token(), "{cell}");
                                    assert!(next.is_takeover(), "{cell}");
                                    "run"
                                }
                                KeyClaim::Replay(_) => "replay",
                                KeyClaim::InFlight { .. } => "in flight",
                                KeyClaim::Mismatch => "mismatch",
                            };
                            assert_eq!(found, expected, "{cell}");
                        }
                    }
                }
            }
        }
    }
    assert_eq!(cells, 24);
    // And a request with another fingerprint is told so, whatever the row holds.
    let other = Fingerprint::builder("POST", "/charges").body(b"{\"amount\":2}");
    let key = IdempotencyKey::new("cell1").unwrap();
    let began = keys
        .claim(&scope, &key, &other, Duration::from_secs(60))
        .await;
    let view = KeyRowView {
        same_request: false,
        answered: false,
        lease_left_ms: 60_000,
    };
    assert_eq!(settle(view, Some(())), Settlement::Mismatch);
    assert_eq!(began.unwrap(), KeyClaim::Mismatch);
}
