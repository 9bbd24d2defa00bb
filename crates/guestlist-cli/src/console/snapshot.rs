//! What the page shows at one moment, read with the library calls `guestlist stats` and
//! `guestlist outbox dead list` make.

use std::time::Duration;

use guestlist::{
    Backend, Inbox, Retention,
    inbox::{DeadGroup, InboxStats, IncomingDeadLetter, MidSteps},
    keys::{HeldKey, KeyStats},
    outbox::{DeadLetter, OutboxStats, OutgoingGroup},
};

use super::Tables;
use crate::keys::sql_keys;
use crate::stats::{missing_table, optional, read_inbox, read_outbox};

/// The most dead letters the page lists (the count covers them all).
pub(crate) const DEAD_LETTERS_SHOWN: u32 = 50;
/// The most messages mid-steps the page lists.
pub(crate) const MID_STEPS_SHOWN: u32 = 20;
/// The most keys in flight the page lists (the count covers them all).
pub(crate) const HELD_KEYS_SHOWN: u32 = 20;

/// Every table's figures at one moment; a table that is not there is `None`, and a table that
/// could not be read says why in `trouble`.
#[derive(Default)]
pub(crate) struct Snapshot {
    /// The key table's figures.
    pub(crate) keys: Option<KeyStats>,
    /// The keys without a response, newest first, up to [`HELD_KEYS_SHOWN`].
    pub(crate) held: Vec<HeldKey>,
    /// Whether the key table holds keyed hashes (GUESTLIST_KEY_HASHING_SECRET): then the keys
    /// listed are hashes, which no eviction by key finds.
    pub(crate) keys_hashed: bool,
    /// The inbox's figures.
    pub(crate) inbox: Option<InboxStats>,
    /// The incoming dead letters: how many wait, the newest up to [`DEAD_LETTERS_SHOWN`], and
    /// the failure groups of the newest [`GROUPED`]; `None` without their table.
    pub(crate) incoming: Option<Incoming>,
    /// The messages mid-steps, the longest stalled first, up to [`MID_STEPS_SHOWN`]; `None`
    /// without the inbox's steps table.
    pub(crate) mid_steps: Option<Vec<MidSteps>>,
    /// The outbox's figures, with its dead letters.
    pub(crate) outbox: Option<OutboxFigures>,
    /// Rows past each table's retention, still waiting for a purge: (table, rows, retention).
    pub(crate) purge: Vec<(String, u64, Duration)>,
    /// What could not be read, and why.
    pub(crate) trouble: Vec<String>,
}

/// The incoming dead letters' part of a [`Snapshot`].
pub(crate) struct Incoming {
    /// How many are dead or being retried.
    pub(crate) waiting: u64,
    /// The newest, retried ones included, up to [`DEAD_LETTERS_SHOWN`].
    pub(crate) letters: Vec<IncomingDeadLetter>,
    /// The failure groups of those waiting, the largest first.
    pub(crate) groups: Vec<DeadGroup>,
}

/// The most incoming dead letters read to group them.
pub(crate) const GROUPED: u32 = 10_000;

/// The outbox's part of a [`Snapshot`].
pub(crate) struct OutboxFigures {
    /// Pending messages, shards and relays.
    pub(crate) stats: OutboxStats,
    /// How many outgoing dead letters there are; `None` without a dead-letter table.
    pub(crate) dead: Option<u64>,
    /// The oldest of them, up to [`DEAD_LETTERS_SHOWN`].
    pub(crate) letters: Vec<DeadLetter>,
    /// Their failure groups (of the oldest [`GROUPED`]), the largest first.
    pub(crate) groups: Vec<OutgoingGroup>,
}

/// How long rows are kept: the page counts the rows a purge should have deleted by now.
#[derive(Clone, Copy)]
pub(crate) struct Retentions {
    /// The inbox's.
    pub(crate) inbox: Duration,
    /// The key table's.
    pub(crate) keys: Duration,
}

impl Snapshot {
    /// Reads every table in `tables` on `pool`.
    pub(crate) async fn read<DB: Backend>(
        pool: &guestlist::sqlx::Pool<DB>,
        tables: &Tables,
        retentions: Retentions,
    ) -> Self {
        let mut snapshot = Snapshot::default();
        let keys = sql_keys(pool.clone(), tables.keys.as_str());
        match keys {
            Ok(keys) => {
                snapshot.keys = snapshot.note(&tables.keys, optional(read_keys(&keys).await));
                if snapshot.keys.is_some() {
                    let held = keys.in_flight(HELD_KEYS_SHOWN).await.map_err(Into::into);
                    snapshot.held = snapshot
                        .note(&tables.keys, held.map(Some))
                        .unwrap_or_default();
                    snapshot.keys_hashed = matches!(crate::secrets::key_hashing(), Ok(Some(_)));
                    let past = past_retention(&keys, retentions.keys).await;
                    snapshot.purge_row(&tables.keys, past, retentions.keys);
                }
            }
            Err(err) => snapshot.trouble.push(format!("{}: {err:#}", tables.keys)),
        }
        let inbox = optional(read_inbox(pool, tables.inbox.as_str()).await);
        snapshot.inbox = snapshot.note(&tables.inbox, inbox);
        if snapshot.inbox.is_some() {
            let past = inbox_past_retention(pool, tables, retentions.inbox).await;
            snapshot.purge_row(&tables.inbox, past, retentions.inbox);
            let incoming = optional(read_incoming(pool, tables).await);
            snapshot.incoming = snapshot.note(&format!("{}_dead", tables.inbox), incoming);
            let inbox = Inbox::<DB>::in_table(tables.inbox.clone());
            let mid = inbox
                .mid_steps(pool, MID_STEPS_SHOWN)
                .await
                .map_err(Into::into);
            snapshot.mid_steps = snapshot.note(&format!("{}_steps", tables.inbox), optional(mid));
        }
        let outbox = optional(read_outbox(pool, tables.outbox.as_str()).await);
        if let Some((stats, dead)) = snapshot.note(&tables.outbox, outbox) {
            let letters = match dead {
                Some(_) => read_dead_letters(pool, tables).await,
                None => Ok(Vec::new()),
            };
            let mut letters = snapshot
                .note(&tables.outbox, letters.map(Some))
                .unwrap_or_default();
            let groups = OutgoingGroup::of(&letters);
            letters.truncate(DEAD_LETTERS_SHOWN as usize);
            snapshot.outbox = Some(OutboxFigures {
                stats,
                dead,
                letters,
                groups,
            });
        }
        snapshot
    }

    /// `read`'s value, or `None` with why noted.
    fn note<T>(
        &mut self,
        table: &impl std::fmt::Display,
        read: anyhow::Result<Option<T>>,
    ) -> Option<T> {
        read.unwrap_or_else(|err| {
            self.trouble.push(format!("{table}: {err:#}"));
            None
        })
    }

    fn purge_row(
        &mut self,
        table: &impl std::fmt::Display,
        past: anyhow::Result<u64>,
        retention: Duration,
    ) {
        match past {
            Ok(rows) => self.purge.push((table.to_string(), rows, retention)),
            // A table without the purge's index or column is told by its figures already.
            Err(err) if missing_table(&err) => {}
            Err(err) => self.trouble.push(format!("{table} (purge): {err:#}")),
        }
    }
}

async fn read_keys<DB: Backend>(keys: &guestlist::SqlKeyStore<DB>) -> anyhow::Result<KeyStats> {
    Ok(keys.stats().await?)
}

async fn past_retention<DB: Backend>(
    keys: &guestlist::SqlKeyStore<DB>,
    retention: Duration,
) -> anyhow::Result<u64> {
    let retention = Retention::new(retention, Duration::ZERO)?;
    Ok(keys.purge(retention).count(keys.pool()).await?)
}

async fn inbox_past_retention<DB: Backend>(
    pool: &guestlist::sqlx::Pool<DB>,
    tables: &Tables,
    retention: Duration,
) -> anyhow::Result<u64> {
    let retention = Retention::new(retention, Duration::ZERO)?;
    let inbox = Inbox::<DB>::in_table(tables.inbox.clone());
    Ok(inbox.purge(retention).count(pool).await?)
}

async fn read_incoming<DB: Backend>(
    pool: &guestlist::sqlx::Pool<DB>,
    tables: &Tables,
) -> anyhow::Result<Incoming> {
    let inbox = Inbox::<DB>::in_table(tables.inbox.clone());
    let waiting = inbox.dead_count(pool).await?;
    let mut letters = inbox.dead_letters(pool, GROUPED).await?;
    let groups = DeadGroup::of(&letters);
    letters.truncate(DEAD_LETTERS_SHOWN as usize);
    Ok(Incoming {
        waiting,
        letters,
        groups,
    })
}

async fn read_dead_letters<DB: Backend>(
    pool: &guestlist::sqlx::Pool<DB>,
    tables: &Tables,
) -> anyhow::Result<Vec<DeadLetter>> {
    let outbox = guestlist::Outbox::<DB>::in_table(tables.outbox.clone());
    Ok(outbox.dead_letters(pool, GROUPED).await?)
}
