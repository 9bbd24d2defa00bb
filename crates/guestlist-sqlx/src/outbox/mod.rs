//! The outbox: outgoing messages written on the business change's own transaction.

use std::marker::PhantomData;
use std::sync::Arc;

use guestlist_core::{MessageId, Retention, TableName};

use crate::Error;
use crate::backend::{Backend, OutboxRow, OutboxSql, RelaySql, TableSql};
use crate::fencing::new_token;
use crate::purge::{Purge, Purgeable, sealed};
use crate::scaffold::{clone_without_bound, on_one_table};

mod dead;
mod dead_edit;
mod dead_groups;
mod held;
mod lease;
mod progress;
mod publication;
mod relay;
mod relay_settings;
mod reshard;
mod round;
mod shards;
mod stats;
mod waves;

pub use dead::DeadLetter;
pub use dead_edit::{DeadEdit, EDITED_HEADER};
pub use dead_groups::OutgoingGroup;
// Hold no SQL: they live in guestlist-core, beside the consumer side's types, and are named here
// too, where the outbox and its relay use them.
pub use guestlist_core::{Confirmed, OutboxMessage, Outcomes, Outgoing, Publish, PublishError};
pub use relay::{Relay, Relayed};
pub use stats::{OutboxStats, RelayLease, RelayStats, ShardStats};

/// Outgoing messages kept in one table until a relay has published them.
///
/// A service that saves an order and then publishes `OrderPaid` loses the event when it crashes
/// between the two, and publishes an event for a write that rolled back when the order fails
/// after it. With the outbox the event is a row written on the order's own transaction
/// ([`Outbox::enqueue`]): it commits with the order or not at all, and a relay publishes what
/// committed. The relay publishes at least once (a crash between the broker's confirmation and
/// the row's stamp publishes it again); each message carries its id, so the broker's
/// deduplication window drops most repeats and the consumers' [`Inbox`](crate::Inbox) the rest.
///
/// Messages with the same [`OrderingKey`](guestlist_core::OrderingKey) get consecutive places
/// (`seq`) in the order their transactions commit: enqueueing on a key locks the key's row until
/// the transaction ends, so a second transaction on the key waits for the first.
///
/// Cheap to clone; build one per table and share it. Like the [`crate::Inbox`], it holds no
/// pool: [`Outbox::enqueue`] joins the caller's transaction, and the operator's calls take the
/// pool; the [`Relay`] that publishes the table holds its own.
///
/// ```no_run
/// # async fn run(pool: sqlx::PgPool) -> Result<(), guestlist_sqlx::Error> {
/// use guestlist_sqlx::{OrderingKey, Outbox, Outgoing, Topic};
///
/// let outbox = Outbox::<sqlx::Postgres>::new();
/// outbox.migrate(&pool).await?;
///
/// let mut tx = pool.begin().await?;
/// sqlx::query("UPDATE orders SET status = 'PAID' WHERE id = 42")
///     .execute(&mut *tx)
///     .await?;
/// let paid = Outgoing::new(Topic::new("orders.paid")?, br#"{"order":42}"#.to_vec())
///     .ordering_key(OrderingKey::new("order-42")?);
/// let enqueued = outbox.enqueue(&mut *tx, &paid).await?;
/// tx.commit().await?; // the order and its event, together
/// println!("enqueued {}", enqueued.message_id);
/// # Ok(()) }
/// ```
pub struct Outbox<DB: Backend> {
    pub(crate) sql: Arc<OutboxSql>,
    pub(crate) relay: Arc<RelaySql>,
    db: PhantomData<fn() -> DB>,
}

/// What [`Outbox::enqueue`] did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Enqueued {
    /// The message's id: the one given, or the new one.
    pub message_id: MessageId,
    /// `false` when a message with this id was already in the outbox: nothing was added.
    pub added: bool,
    /// The message's place among its ordering key's (0 without a key, and 0 when nothing was
    /// added: the message already there kept its place, and this call took none). A key's
    /// places run 1, 2, 3… without gaps.
    pub seq: i64,
}

clone_without_bound!(Outbox<DB: Backend> { sql, relay, db });
on_one_table!(Outbox, "An outbox", "guestlist_outbox");

impl<DB: Backend> Default for Outbox<DB> {
    fn default() -> Self {
        Self::new()
    }
}

impl<DB: Backend> Outbox<DB> {
    /// An outbox in an already validated table.
    pub fn in_table(table: TableName) -> Self {
        Self {
            sql: Arc::new(OutboxSql::new::<DB>(&table)),
            relay: Arc::new(RelaySql::new::<DB>(&table)),
            db: PhantomData,
        }
    }

    /// The table that holds the messages (with `<table>_keys` for the ordering keys' places,
    /// `<table>_relay` for the relays' lease and `<table>_dead` for the outgoing dead letters).
    pub fn table(&self) -> &TableName {
        &self.sql.common.table
    }

    /// The DDL that [`Outbox::migrate`] runs, one statement per entry, for users who run their
    /// own migrations. The same text ships as `sql/<backend>/outbox.sql` in this crate.
    pub fn ddl(&self) -> &[String] {
        &self.sql.common.ddl
    }

    /// Creates the tables and their indexes if they are missing.
    pub async fn migrate(&self, pool: &sqlx::Pool<DB>) -> Result<(), Error> {
        let mut conn = pool.acquire().await?;
        self.sql.common.migrate::<DB>(&mut conn).await?;
        tracing::info!(backend = DB::BACKEND, table = %self.table(), "guestlist outbox tables ready");
        Ok(())
    }

    /// Writes `message` on the caller's transaction `conn` (`&mut *tx`), to be published once
    /// that transaction commits; a rollback takes it back with the rest. A connection outside a
    /// transaction is refused with [`Error::NotInTransaction`]: the message would be published
    /// whether or not the business change commits.
    ///
    /// A message with an ordering key waits here while another open transaction holds the key,
    /// and takes the next place once that one ends. A message whose id is already in the outbox
    /// adds nothing ([`Enqueued::added`] is `false`).
    pub async fn enqueue(
        &self,
        conn: &mut DB::Connection,
        message: &Outgoing,
    ) -> Result<Enqueued, Error> {
        crate::inbox::require_transaction::<DB>(conn)?;
        let message_id = match message.message_id() {
            Some(id) => id.clone(),
            None => new_message_id()?,
        };
        let ordering_key = message.key().map(|key| key.as_str());
        let seq = match ordering_key {
            Some(key) => DB::outbox_next_seq(conn, &self.sql, key)
                .await
                .map_err(|err| self.error(err))?,
            None => 0,
        };
        let headers = message.stored_headers();
        let row = OutboxRow {
            message_id: message_id.as_str(),
            topic: message.topic().as_str(),
            ordering_key,
            seq,
            headers: headers.as_deref(),
            payload: message.payload(),
            slot: guestlist_core::protocol::slot(ordering_key, message_id.as_str()),
        };
        let added = DB::outbox_insert(conn, &self.sql, row)
            .await
            .map_err(|err| self.error(err))?;
        if let (false, Some(key)) = (added, ordering_key) {
            // The message was there already (a retry of an enqueue whose commit landed): its
            // place is the one it took then, and the seq just taken would be a gap.
            DB::outbox_give_back_seq(conn, &self.sql, key, seq)
                .await
                .map_err(|err| self.error(err))?;
        }
        Ok(Enqueued {
            message_id,
            added,
            seq: if added { seq } else { 0 },
        })
    }

    /// A purge of the published messages older than `retention`, for rows a relay kept
    /// ([`Relay::keep_published`]: by default it deletes each message's row once published);
    /// messages not yet published are never purged.
    pub fn purge(&self, retention: Retention) -> Purge<'_, DB> {
        Purge::new(&self.sql.common, retention)
    }

    pub(crate) fn error(&self, err: sqlx::Error) -> Error {
        Error::from_store::<DB>(self.table(), err)
    }
}

/// A new message id: `msg_` and 128 random bits in hex.
fn new_message_id() -> Result<MessageId, Error> {
    let (high, low) = (new_token()?, new_token()?);
    Ok(MessageId::new(format!("msg_{high:016x}{low:016x}"))?)
}

impl<DB: Backend> sealed::Sealed for Outbox<DB> {}

impl<DB: Backend> Purgeable<DB> for Outbox<DB> {
    fn purge_table(&self) -> Arc<TableSql> {
        Arc::clone(&self.sql.common)
    }
}
