//! Every model checked within its bounds, with the protocol's moves (no counterexample), and with
//! a broken move each (the check finds it).

use std::time::Instant;

use guestlist_core::protocol::{KeyLeaseRow, KeyRowView, RelayLeaseRow, Settlement};
use guestlist_model::consumer::{ConsumerModel, ConsumerMoves};
use guestlist_model::keys::{KeyModel, KeyMoves, Mode};
use guestlist_model::relay::{RelayModel, RelayMoves};
use guestlist_model::steps::{StepModel, StepMoves};
use stateright::{Checker, CheckerBuilder, HasDiscoveries, Model};

/// Checks `model` to the end and reports its figures; the names of the properties it broke.
fn check<M>(name: &str, model: M) -> Vec<&'static str>
where
    M: Model + Send + Sync + Clone + 'static,
    M::State: Clone + std::fmt::Debug + std::hash::Hash + Eq + Send + Sync + 'static,
    M::Action: Clone + std::fmt::Debug + std::hash::Hash + Eq + Send + Sync + 'static,
{
    run(name, model.checker())
}

/// Checks `model` until it breaks `property` (or to the end): the names of the properties it
/// broke by then.
fn break_of<M>(name: &str, model: M, property: &'static str) -> Vec<&'static str>
where
    M: Model + Send + Sync + Clone + 'static,
    M::State: Clone + std::fmt::Debug + std::hash::Hash + Eq + Send + Sync + 'static,
    M::Action: Clone + std::fmt::Debug + std::hash::Hash + Eq + Send + Sync + 'static,
{
    let until = HasDiscoveries::AnyOf([property].into_iter().collect());
    run(name, model.checker().finish_when(until))
}

fn run<M>(name: &str, checker: CheckerBuilder<M>) -> Vec<&'static str>
where
    M: Model + Send + Sync + Clone + 'static,
    M::State: Clone + std::fmt::Debug + std::hash::Hash + Eq + Send + Sync + 'static,
    M::Action: Clone + std::fmt::Debug + std::hash::Hash + Eq + Send + Sync + 'static,
{
    let started = Instant::now();
    let checker = checker.threads(2).spawn_bfs().join();
    let discoveries = checker.discoveries();
    let mut broken: Vec<&'static str> = discoveries
        .iter()
        .filter(|(name, _)| {
            let property = checker.model().property(name);
            property.expectation.discovery_is_failure()
        })
        .map(|(name, _)| *name)
        .collect();
    broken.sort_unstable();
    println!(
        "{name}: {} states ({} unique), depth {}, {:.1?}; broken: {broken:?}",
        checker.state_count(),
        checker.unique_state_count(),
        checker.max_depth(),
        started.elapsed()
    );
    for (property, path) in &discoveries {
        if broken.contains(property) {
            println!("counterexample to {property:?}:");
        } else {
            println!("example of {property:?}:");
        }
        {
            for action in path.clone().into_actions() {
                println!("  {action:?}");
            }
        }
    }
    assert!(
        checker.unique_state_count() > 10,
        "{name} explored almost nothing"
    );
    broken
}

// The bounds of the checks that must hold: each run takes seconds; together they stay well
// under the two minutes the suite allows them.

#[test]
fn the_key_protocol_holds_in_transactional_mode() {
    let mut model = KeyModel::new(Mode::Transactional);
    (model.crashes, model.failures, model.horizon) = (4, 2, 10);
    assert_eq!(check("keys, transactional", model), Vec::<&str>::new());
}

#[test]
fn the_key_protocol_holds_in_plain_mode() {
    let mut model = KeyModel::new(Mode::Plain);
    (model.crashes, model.failures, model.horizon) = (3, 2, 8);
    assert_eq!(check("keys, plain", model), Vec::<&str>::new());
}

#[test]
fn the_relay_protocol_holds_with_three_relays() {
    let mut model = RelayModel::new();
    (
        model.relays,
        model.crashes,
        model.losses,
        model.horizon,
        model.takes,
    ) = (3, 1, 1, 10, 8);
    assert_eq!(check("relay, three relays", model), Vec::<&str>::new());
}

#[test]
fn the_relay_protocol_holds_with_two_messages_on_each_key() {
    let mut model = RelayModel::new();
    model.messages = vec![(0, 1), (1, 1), (0, 2), (1, 2)];
    (model.crashes, model.losses, model.horizon, model.takes) = (1, 2, 8, 8);
    assert_eq!(check("relay, four messages", model), Vec::<&str>::new());
}

#[test]
fn a_claim_that_ignores_the_fingerprint_is_caught() {
    let mut model = KeyModel::new(Mode::Transactional);
    model.moves = KeyMoves {
        settle: |row, take_over| {
            guestlist_core::protocol::settle(
                KeyRowView {
                    same_request: true,
                    ..row
                },
                take_over,
            )
        },
        ..KeyMoves::PROTOCOL
    };
    let property = "a client is told done only for work that committed, of its own request";
    let broken = break_of("keys, fingerprint ignored", model, property);
    assert!(broken.contains(&property), "{broken:?}");
}

#[test]
fn a_take_over_before_the_lease_ends_is_caught() {
    let mut model = KeyModel::new(Mode::Plain);
    model.moves = KeyMoves {
        settle: |row, take_over| match guestlist_core::protocol::settle(row, take_over) {
            Settlement::InFlight { .. } => Settlement::TakeOver(()),
            settled => settled,
        },
        may_take_over: |row: &KeyLeaseRow, held, _now| row.token == held && !row.answered,
        ..KeyMoves::PROTOCOL
    };
    let property = "no two attempts hold the key at once";
    let broken = break_of("keys, lease ignored", model, property);
    assert!(broken.contains(&property), "{broken:?}");
}

#[test]
fn a_completion_without_its_fencing_token_is_caught() {
    let mut model = KeyModel::new(Mode::Transactional);
    model.moves = KeyMoves {
        may_complete: |_row, _token| true,
        ..KeyMoves::PROTOCOL
    };
    let property = "a stored answer is never overwritten";
    let broken = break_of("keys, complete unfenced", model, property);
    assert!(broken.contains(&property), "{broken:?}");
}

#[test]
fn a_relay_that_stamps_what_the_broker_did_not_confirm_is_caught() {
    let mut model = RelayModel::new();
    model.moves = RelayMoves {
        stamp: |rows, _outcomes| rows.iter().map(|row| row.id).collect(),
        ..RelayMoves::PROTOCOL
    };
    let property = "a row is stamped only once the broker has it";
    let broken = break_of("relay, stamps unconfirmed", model, property);
    assert!(broken.contains(&property), "{broken:?}");
}

#[test]
fn a_lease_taken_before_it_ends_is_caught() {
    let mut model = RelayModel::new();
    model.moves = RelayMoves {
        take: |row: &mut RelayLeaseRow, now, lease_ms| {
            row.token += 1;
            row.lease_until = now + lease_ms;
            Some(row.token)
        },
        ..RelayMoves::PROTOCOL
    };
    let property = "no two relays may publish at once";
    let broken = break_of("relay, lease taken early", model, property);
    assert!(broken.contains(&property), "{broken:?}");
}

#[test]
fn a_release_without_its_token_is_caught() {
    let mut model = RelayModel::new();
    model.moves = RelayMoves {
        release: |row: &mut RelayLeaseRow, _token| row.lease_until = i64::MIN,
        ..RelayMoves::PROTOCOL
    };
    let property = "no two relays may publish at once";
    let broken = break_of("relay, release unfenced", model, property);
    assert!(broken.contains(&property), "{broken:?}");
}

#[test]
fn the_consumer_protocol_holds() {
    let mut model = ConsumerModel::new();
    (
        model.consumers,
        model.crashes,
        model.failures,
        model.horizon,
    ) = (3, 3, 2, 10);
    assert_eq!(check("consumer", model), Vec::<&str>::new());
}

#[test]
fn a_consumer_that_counts_deferrals_as_failures_is_caught() {
    let mut model = ConsumerModel::new();
    model.moves = ConsumerMoves {
        counted: |count, _deferrals| count,
        ..ConsumerMoves::PROTOCOL
    };
    let property = "a message is poison only after max_deliveries runs failed or died";
    let broken = break_of("consumer, deferrals counted", model, property);
    assert!(broken.contains(&property), "{broken:?}");
}

#[test]
fn a_consumer_that_calls_a_handled_message_poison_is_caught() {
    let mut model = ConsumerModel::new();
    model.moves = ConsumerMoves {
        asks_inbox_on_arrival: false,
        ..ConsumerMoves::PROTOCOL
    };
    let property = "a message handled is never dead-lettered as poison";
    let broken = break_of("consumer, inbox not asked", model, property);
    assert!(broken.contains(&property), "{broken:?}");
}

#[test]
fn the_steps_protocol_holds() {
    assert_eq!(check("steps", StepModel::new()), Vec::<&str>::new());
}

#[test]
fn a_journal_row_without_its_fencing_token_is_caught() {
    let model = StepModel {
        moves: StepMoves {
            may_journal: |_: &KeyLeaseRow, _| true,
            ..StepMoves::PROTOCOL
        },
        ..StepModel::new()
    };
    let broken = break_of(
        "steps, journaled by any run",
        model,
        "no run journals once another holds the message",
    );
    assert!(
        broken.contains(&"no run journals once another holds the message"),
        "{broken:?}"
    );
}
