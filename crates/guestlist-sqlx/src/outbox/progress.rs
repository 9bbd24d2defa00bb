//! Where a relay stands between rounds, and what a round found.

use std::time::Instant;

use crate::backend::PendingRow;
use crate::outbox::held::HeldKeys;
use crate::outbox::lease::Leases;
use guestlist_core::{Confirmed, PublishError};

/// Where a relay stands between rounds.
pub(super) struct Progress {
    /// The shards this relay holds, while it holds any.
    pub(super) lease: Option<Leases>,
    /// When the relay last beat its heartbeat and looked at its share of the shards.
    pub(super) coordinated_at: Option<std::time::Instant>,
    /// Its share when it last looked.
    pub(super) quota: usize,
    /// The batch published last round, to be settled and stamped this round.
    pub(super) carried: Option<Published>,
    /// Keys whose head the broker refused: nothing after the head goes out meanwhile.
    pub(super) held: HeldKeys,
    /// Messages a round takes now: the setting, halved after a round that ran out of time.
    pub(super) batch: usize,
    /// Whether the last round settled a confirmation: the broker answers again.
    pub(super) confirmed: bool,
    /// When a message was last stamped or dead-lettered, or the outbox last found empty.
    pub(super) moved_at: Instant,
    /// When the relay last warned that nothing moves.
    pub(super) warned_at: Option<Instant>,
}

impl Progress {
    pub(super) fn new(batch: usize) -> Self {
        Self {
            lease: None,
            coordinated_at: None,
            quota: 0,
            carried: None,
            held: HeldKeys::default(),
            batch,
            confirmed: false,
            moved_at: Instant::now(),
            warned_at: None,
        }
    }
}

/// A batch the broker has answered for, waiting to be settled and stamped.
pub(super) struct Published {
    pub(super) rows: Vec<PendingRow>,
    pub(super) outcomes: Vec<Option<Result<Confirmed, PublishError>>>,
}

/// What one round found.
pub(super) enum Round {
    /// A batch went out: there may be more at once.
    More,
    /// Nothing more to publish now: wait for a commit, the poll, or a held key's turn.
    Idle,
    /// This relay holds no shard: other relays hold them all.
    Standby,
    /// The broker or the way to it is down: back off as a whole.
    Outage(PublishError),
}
