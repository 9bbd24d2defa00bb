//! What every table knows of one id, in the order it happened: an operator's answer to "what
//! happened to order 42's event?".
//!
//! Given a message id, an idempotency key or a key derived from one (`warehouse:evt_9f3k/charge`),
//! a [`History`] reads the inbox (each handler's claim, its deferrals), the outbox (the message
//! committed, published, dead-lettered and why, the shard and the relay holding it) and the key
//! table (the key and every key carried downstream from it: state, status, attempts, lease).
//! `guestlist history ID` prints it.

mod find;
mod ids;

use std::sync::Arc;
use std::time::SystemTime;

use guestlist_core::{KeyState, TableName};

use crate::Error;
use crate::backend::Backend;
use crate::backend::history::HistorySql;
use crate::outbox::Outbox;
use crate::scaffold::clone_without_bound;

/// Looks an id up in an inbox, an outbox and a key table of one database.
///
/// ```no_run
/// # async fn run(pool: sqlx::PgPool) -> Result<(), guestlist_sqlx::Error> {
/// use guestlist_sqlx::History;
///
/// let found = History::<sqlx::Postgres>::new().find(&pool, "evt_9f3k").await?;
/// for sighting in &found.sightings {
///     println!("{:?} in {}: {:?}", sighting.at, sighting.table, sighting.seen);
/// }
/// # Ok(())
/// # }
/// ```
pub struct History<DB: Backend> {
    inbox: TableName,
    outbox: Outbox<DB>,
    keys: TableName,
    sql: Arc<HistorySql>,
}

clone_without_bound!(History<DB: Backend> { inbox, outbox, keys, sql });

impl<DB: Backend> std::fmt::Debug for History<DB> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("History")
            .field("backend", &DB::BACKEND)
            .field("inbox", &self.inbox.as_str())
            .field("outbox", &self.outbox.table().as_str())
            .field("keys", &self.keys.as_str())
            .finish()
    }
}

impl<DB: Backend> Default for History<DB> {
    fn default() -> Self {
        Self::new()
    }
}

impl<DB: Backend> History<DB> {
    /// A history of the tables of their default names: `guestlist_inbox`, `guestlist_outbox`,
    /// `guestlist_keys`.
    pub fn new() -> Self {
        let name = |name: &str| TableName::new(name).expect("the default table names are valid");
        Self::with_tables(
            name("guestlist_inbox"),
            name("guestlist_outbox"),
            name("guestlist_keys"),
        )
    }

    /// A history of the tables named: the inbox, the outbox and the key table (each of them may be
    /// absent from the database: [`Found::missing`] says which were).
    pub fn with_tables(inbox: TableName, outbox: TableName, keys: TableName) -> Self {
        let sql = Arc::new(HistorySql::new::<DB>(&inbox, &outbox, &keys));
        Self {
            outbox: Outbox::in_table(outbox),
            inbox,
            keys,
            sql,
        }
    }

    /// Everything the tables know of `id`, oldest first, and of the work it was carried from
    /// where it is a key carried downstream (`handler:message/step`: the message too). Reads the inbox and the key table whole where their indexes do not
    /// lead with the id (an operator's lookup, not a hot path).
    pub async fn find(&self, pool: &sqlx::Pool<DB>, id: &str) -> Result<Found, Error> {
        let messages = ids::messages_of(id);
        let mut found = Found {
            id: id.to_owned(),
            carried_from: messages[1..].to_vec(),
            sightings: Vec::new(),
            missing: Vec::new(),
        };
        self.find_in_inbox(pool, &messages, &mut found).await?;
        self.find_in_outbox(pool, &messages, &mut found).await?;
        self.find_in_keys(pool, id, &messages, &mut found).await?;
        // A table beside one that is missing is missing with it: name the one.
        let main: Vec<String> = found.missing.clone();
        found.missing.retain(|table| {
            !["_deferrals", "_relay", "_dead"].iter().any(|suffix| {
                table
                    .strip_suffix(suffix)
                    .is_some_and(|owner| main.iter().any(|m| m == owner))
            })
        });
        // Oldest first; what happened at one moment keeps the order the tables were read in.
        found.sightings.sort_by_key(|sighting| sighting.at);
        Ok(found)
    }
}

/// What the tables know of one id. With the `serde` feature it serializes as `guestlist history
/// --json` prints it: each sighting's [`Seen`] flattened beside its time (RFC 3339, to the
/// millisecond) and table, under `"what"`.
#[derive(Debug, Clone, PartialEq, Eq)]
#[cfg_attr(feature = "serde", derive(serde::Serialize))]
#[non_exhaustive]
pub struct Found {
    /// The id looked up.
    pub id: String,
    /// Where `id` is a key carried downstream, the work it was carried from, nearest first
    /// (`warehouse:evt_9f3k/charge`: `evt_9f3k`), looked up too.
    pub carried_from: Vec<String>,
    /// What each table knows, oldest first.
    pub sightings: Vec<Sighting>,
    /// The tables the database does not have (not every service keeps all three).
    #[cfg_attr(feature = "serde", serde(rename = "missing_tables"))]
    pub missing: Vec<String>,
}

/// One thing a table knows of the id, and when it happened.
#[derive(Debug, Clone, PartialEq, Eq)]
#[cfg_attr(feature = "serde", derive(serde::Serialize))]
#[non_exhaustive]
pub struct Sighting {
    /// When it happened, by the database's clock (by the handler's machine's, for a deferral),
    /// to the millisecond.
    #[cfg_attr(feature = "serde", serde(serialize_with = "rfc3339_millis"))]
    pub at: SystemTime,
    /// The table that knows it.
    pub table: String,
    /// What it knows.
    #[cfg_attr(feature = "serde", serde(flatten))]
    pub seen: Seen,
}

/// `at` as RFC 3339 to the millisecond, as `guestlist history` prints it.
#[cfg(feature = "serde")]
fn rfc3339_millis<S: serde::Serializer>(at: &SystemTime, serializer: S) -> Result<S::Ok, S::Error> {
    serializer.collect_str(&humantime::format_rfc3339_millis(*at))
}

/// A relay holding a shard's lease (or stamping a row), with the shard's fencing token then.
#[derive(Debug, Clone, PartialEq, Eq)]
#[cfg_attr(feature = "serde", derive(serde::Serialize))]
#[non_exhaustive]
pub struct Holder {
    /// The relay's name.
    pub relay: String,
    /// The shard's fencing token.
    pub token: i64,
}

/// What a table knows of an id. With the `serde` feature each serializes with its kind under
/// `"what"` (`claimed`, `deferred`, `gave_up`, `enqueued`, `published`, `dead_lettered`,
/// `key`) beside its fields.
#[derive(Debug, Clone, PartialEq, Eq)]
#[cfg_attr(feature = "serde", derive(serde::Serialize))]
#[cfg_attr(feature = "serde", serde(tag = "what", rename_all = "snake_case"))]
#[non_exhaustive]
pub enum Seen {
    /// A handler claimed the message: its work committed with the claim.
    Claimed {
        /// The handler.
        handler: String,
        /// The message id.
        message_id: String,
    },
    /// A handler said "not yet" to the message (the time is the first deferral's).
    Deferred {
        /// The handler.
        handler: String,
        /// The message id.
        message_id: String,
        /// How many times so far.
        deferrals: u64,
    },
    /// A handler gave up on the message: the consumer moved it to the broker's dead-letter
    /// place (it failed too often, or was deferred past its limit).
    GaveUp {
        /// The handler.
        handler: String,
        /// The message id.
        message_id: String,
        /// Why.
        reason: String,
        /// The broker's delivery count then.
        deliveries: u64,
    },
    /// A step of the handler's named steps finished, its result journaled (DESIGN 4d): a
    /// redelivery replays it instead of running it.
    StepDone {
        /// The handler.
        handler: String,
        /// The message id.
        message_id: String,
        /// Its place among the message's steps, from 1.
        place: u32,
        /// The step's name.
        step: String,
        /// The size of its journaled result, in bytes (JSON).
        result_bytes: u64,
    },
    /// A run of the handler's steps holds the message, or held it (the time is its lease's
    /// end): with lease left, a run works on it; with none, a run died or gave up mid-steps
    /// (the next delivery resumes after the steps done), or the message was handled and its
    /// journal kept.
    StepsRun {
        /// The handler.
        handler: String,
        /// The message id.
        message_id: String,
        /// Milliseconds the run's lease has left (zero or less once it ended).
        lease_left_ms: i64,
        /// The steps finished so far.
        steps_done: u32,
    },
    /// The message committed to the outbox.
    Enqueued {
        /// The message id.
        message_id: String,
        /// Its topic.
        topic: String,
        /// Its ordering key, if it has one.
        ordering_key: Option<String>,
        /// Its place among its key's messages.
        seq: i64,
        /// Its shard (its slot modulo the table's shard count).
        shard: u32,
        /// The relay holding the shard's lease now and its fencing token, while the message
        /// waits.
        #[cfg_attr(feature = "serde", serde(flatten))]
        relay: Option<Holder>,
        /// Whether it waits to be published (a relay that deletes what it published leaves no
        /// row to say it was).
        pending: bool,
    },
    /// A relay stamped the message published (a relay that keeps what it published).
    Published {
        /// The message id.
        message_id: String,
        /// The relay that stamped it and its shard's fencing token then (`None` for a row
        /// stamped before the outbox recorded them).
        #[cfg_attr(feature = "serde", serde(flatten))]
        relay: Option<Holder>,
    },
    /// The message went to the outgoing dead letters.
    DeadLettered {
        /// The message id.
        message_id: String,
        /// Its topic.
        topic: String,
        /// Why.
        reason: String,
        /// The dead letter's id (`guestlist outbox dead retry ID`).
        #[cfg_attr(feature = "serde", serde(rename = "dead_letter_id"))]
        id: i64,
    },
    /// A request took the idempotency key (the key itself, or one carried downstream from it).
    Key {
        /// The scope it is stored under.
        scope: String,
        /// The key.
        key: String,
        /// Where it stands now.
        #[cfg_attr(feature = "serde", serde(flatten))]
        state: KeyState,
        /// Attempts so far.
        attempt: u64,
    },
}
