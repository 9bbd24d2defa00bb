//! Why a message did not go through, at any hop: four kinds, one treatment each.

use std::fmt;

/// Why a message did not go through: the consumer runtime, the outbox relay and the gateway
/// each sort a failure into one of these once, where it happens, and treat each kind one way.
///
/// | kind | what it means | what is done |
/// |---|---|---|
/// | [`Poison`](FailureKind::Poison) | this message is bad: its handler fails on it, or a broker refuses it | counted against the message; at the limit it is dead-lettered with its reason |
/// | [`Outage`](FailureKind::Outage) | something the message depends on is down: the database, the broker, the network | nothing counted; fetching or publishing stops, what is in hand is kept, the hop backs off and resumes by itself |
/// | [`NotYet`](FailureKind::NotYet) | a [`Deferral`](crate::Deferral): the work cannot be done yet | the message waits as told; counted as a deferral, bounded by time, never as poison |
/// | [`Withdrawn`](FailureKind::Withdrawn) | it came back because of another message (its FIFO group or partition rewound, its batch handed back) | nothing counted against it |
///
/// A bad message never holds up or multiplies the good ones behind it: a failure touches its
/// own ordering key only.
///
/// ```
/// use guestlist_core::FailureKind;
///
/// assert!(FailureKind::Poison.counts_against_message());
/// assert!(!FailureKind::Outage.counts_against_message());
/// assert_eq!(FailureKind::NotYet.as_str(), "not_yet");
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum FailureKind {
    /// This message is bad: counted against it, dead-lettered at the limit.
    Poison,
    /// Something it depends on is down: nothing counted; stop, back off, resume.
    Outage,
    /// A deferral: wait as told, bounded by time.
    NotYet,
    /// It came back because of another message: nothing counted against it.
    Withdrawn,
}

impl FailureKind {
    /// Every kind, in the order of the table above.
    pub const ALL: [FailureKind; 4] = [
        FailureKind::Poison,
        FailureKind::Outage,
        FailureKind::NotYet,
        FailureKind::Withdrawn,
    ];

    /// Whether a failure of this kind counts toward the message's dead-lettering.
    pub fn counts_against_message(self) -> bool {
        self == FailureKind::Poison
    }

    /// The kind's name in logs and metric labels: `poison`, `outage`, `not_yet`, `withdrawn`.
    pub fn as_str(self) -> &'static str {
        match self {
            FailureKind::Poison => "poison",
            FailureKind::Outage => "outage",
            FailureKind::NotYet => "not_yet",
            FailureKind::Withdrawn => "withdrawn",
        }
    }
}

impl fmt::Display for FailureKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}
