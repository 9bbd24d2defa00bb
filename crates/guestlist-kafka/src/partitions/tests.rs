use std::time::Duration;

use super::*;

/// Hands out `offsets` of `partition` as polled now; their tickets.
fn handed(partitions: &Partitions, partition: i32, offsets: std::ops::Range<i64>) -> Vec<Ticket> {
    let epoch = partitions.epoch_for_poll(partition).unwrap();
    offsets
        .map(|offset| partitions.hand_out(partition, offset, epoch).unwrap().1)
        .collect()
}

#[test]
fn the_commit_moves_only_past_a_prefix_of_settled_records() {
    let partitions = Partitions::default();
    partitions.assigned([0]);
    let t = handed(&partitions, 0, 10..13);
    partitions.settle(0, 11, t[1]);
    assert_eq!(partitions.to_commit(), vec![]);
    partitions.settle(0, 10, t[0]);
    assert_eq!(partitions.to_commit(), vec![(0, 12)]);
    assert_eq!(partitions.to_commit(), vec![], "committed once");
    partitions.settle(0, 12, t[2]);
    assert_eq!(partitions.to_commit(), vec![(0, 13)]);
}

#[test]
fn a_rewind_withdraws_the_later_records_and_counts_the_failure() {
    let partitions = Partitions::default();
    partitions.assigned([0]);
    let t = handed(&partitions, 0, 0..3);
    partitions.settle(0, 0, t[0]);
    assert_eq!(partitions.to_commit(), vec![(0, 1)]);
    partitions.rewind(0, 1, t[1], Duration::ZERO, true);
    assert!(partitions.withdrawn(0, 1, t[1]));
    assert!(partitions.withdrawn(0, 2, t[2]));
    // The record after it fails too, run before it knew: the rewind stays at the first.
    partitions.rewind(0, 2, t[2], Duration::ZERO, true);
    assert_eq!(
        partitions.epoch_for_poll(0),
        None,
        "stale until the seek is done"
    );
    let rewinds = partitions.take_rewinds();
    assert_eq!((rewinds[0].partition, rewinds[0].offset), (0, 1));
    partitions.rewound(0);
    let epoch = partitions.epoch_for_poll(0).unwrap();
    let (failures, again) = partitions.hand_out(0, 1, epoch).unwrap();
    assert_eq!(failures, 1, "one failure before");
    assert!(
        partitions.withdrawn(0, 1, t[1]),
        "the first hand-out's ticket is not the record's any more"
    );
    partitions.settle(0, 1, t[1]);
    assert_eq!(
        partitions.to_commit(),
        vec![],
        "a stale ticket settles nothing"
    );
    partitions.settle(0, 1, again);
    assert_eq!(partitions.to_commit(), vec![(0, 2)]);
}

#[test]
fn a_rewind_leaves_the_earlier_records_in_hand_to_their_deliveries() {
    // Lanes: records 0 and 1 in one lane, 2 and 3 in another, which lets 2 go unsettled.
    let partitions = Partitions::default();
    partitions.assigned([0]);
    let t = handed(&partitions, 0, 0..4);
    partitions.rewind(0, 2, t[2], Duration::ZERO, false);
    assert!(
        !partitions.withdrawn(0, 0, t[0]),
        "before the rewind: still in hand"
    );
    assert!(!partitions.withdrawn(0, 1, t[1]));
    assert!(partitions.withdrawn(0, 3, t[3]), "after it: read again");
    // The earlier lane goes on: one record done, one handed back (parked).
    partitions.settle(0, 0, t[0]);
    assert!(partitions.park(0, 1, t[1]), "parked, not lost");
    assert_eq!(partitions.to_commit(), vec![(0, 1)]);
    partitions.take_rewinds();
    partitions.rewound(0);
    let again = handed(&partitions, 0, 2..4);
    partitions.settle(0, 2, again[0]);
    partitions.settle(0, 3, again[1]);
    assert_eq!(
        partitions.to_commit(),
        vec![],
        "nothing past the parked record"
    );
    let (failures, unparked) = partitions.unpark(0, 1, t[1]).unwrap();
    assert_eq!(failures, 1);
    partitions.settle(0, 1, unparked);
    assert_eq!(partitions.to_commit(), vec![(0, 4)]);
}

#[test]
fn nothing_past_a_handed_back_record_is_committed_until_it_is_done() {
    let partitions = Partitions::default();
    partitions.assigned([0]);
    let t = handed(&partitions, 0, 0..3);
    partitions.settle(0, 0, t[0]);
    partitions.rewind(0, 1, t[1], Duration::ZERO, true);
    partitions.rewound(0);
    // As if the seek had failed: the record after the handed-back one comes first.
    let epoch = partitions.epoch_for_poll(0).unwrap();
    let (_, two) = partitions.hand_out(0, 2, epoch).unwrap();
    partitions.settle(0, 2, two);
    assert_eq!(partitions.to_commit(), vec![(0, 1)]);
    let (_, one) = partitions.hand_out(0, 1, epoch).unwrap();
    partitions.settle(0, 1, one);
    assert_eq!(partitions.to_commit(), vec![(0, 3)]);
}

#[test]
fn a_parked_record_holds_the_commit_but_not_its_partition() {
    let partitions = Partitions::default();
    partitions.assigned([0]);
    let t = handed(&partitions, 0, 0..3);
    assert!(partitions.park(0, 0, t[0]));
    assert!(
        !partitions.withdrawn(0, 1, t[1]),
        "the records after it stay in hand"
    );
    partitions.settle(0, 1, t[1]);
    partitions.settle(0, 2, t[2]);
    assert_eq!(
        partitions.to_commit(),
        vec![],
        "nothing past a parked record"
    );
    let epoch = partitions.epoch_for_poll(0).unwrap();
    assert_eq!(
        partitions.hand_out(0, 0, epoch),
        None,
        "parked: never handed out twice"
    );
    let (failures, again) = partitions.unpark(0, 0, t[0]).unwrap();
    assert_eq!(failures, 1, "one failure before");
    assert_eq!(partitions.unpark(0, 0, t[0]), None, "unparked once");
    partitions.settle(0, 0, again);
    assert_eq!(partitions.to_commit(), vec![(0, 3)]);
}

#[test]
fn a_rewind_to_a_parked_record_drops_its_copy_in_memory() {
    let partitions = Partitions::default();
    partitions.assigned([0]);
    let t = handed(&partitions, 0, 0..3);
    assert!(partitions.park(0, 1, t[1]));
    partitions.rewind(0, 0, t[0], Duration::ZERO, false);
    assert_eq!(
        partitions.unpark(0, 1, t[1]),
        None,
        "read again from the broker instead"
    );
}

#[test]
fn a_revocation_waits_for_the_records_in_hand_and_returns_their_offsets() {
    let partitions = std::sync::Arc::new(Partitions::default());
    partitions.assigned([0, 1]);
    let t = handed(&partitions, 0, 0..2);
    let settler = {
        let (partitions, t) = (partitions.clone(), t.clone());
        std::thread::spawn(move || {
            std::thread::sleep(Duration::from_millis(100));
            partitions.settle(0, 0, t[0]);
            partitions.settle(0, 1, t[1]);
        })
    };
    let offsets = partitions.revoked(&[0], Duration::from_secs(10));
    settler.join().unwrap();
    assert_eq!(offsets, vec![(0, 2)]);
    assert!(partitions.withdrawn(0, 0, t[0]));
    assert!(partitions.epoch_for_poll(1).is_some(), "partition 1 stays");
}

#[test]
fn a_revocation_withdraws_the_records_behind_a_parked_one_and_waits_only_for_the_rest() {
    let partitions = std::sync::Arc::new(Partitions::default());
    partitions.assigned([0]);
    let t = handed(&partitions, 0, 0..4);
    partitions.settle(0, 0, t[0]);
    assert!(partitions.park(0, 1, t[1]));
    assert!(
        !partitions.withdrawn(0, 2, t[2]),
        "assigned: other keys flow"
    );
    let revoking = {
        let partitions = partitions.clone();
        std::thread::spawn(move || partitions.revoked(&[0], Duration::from_secs(10)))
    };
    let deadline = std::time::Instant::now() + Duration::from_secs(5);
    while !partitions.withdrawn(0, 2, t[2]) {
        assert!(
            std::time::Instant::now() < deadline,
            "a record behind a parked one stays in hand while its partition is taken away"
        );
        std::thread::yield_now();
    }
    assert!(
        partitions.withdrawn(0, 3, t[3]),
        "the parked record is read again by the next owner: nothing behind it runs here first"
    );
    // Let go unsettled (the consumer does not run a withdrawn delivery): no rewind for the poll
    // thread, nothing committed past the parked record.
    partitions.rewind(0, 2, t[2], Duration::ZERO, false);
    partitions.rewind(0, 3, t[3], Duration::ZERO, false);
    assert_eq!(revoking.join().unwrap(), vec![(0, 1)]);
    assert!(partitions.take_rewinds().is_empty());
}
