//! The error type of the stores.

/// What went wrong in a store, with what to do about it.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// A value was refused before anything was sent to the database.
    #[error(transparent)]
    Invalid(#[from] guestlist_core::Error),
    /// The guest list's table is not there.
    #[error(
        "table {table} does not exist: create an inbox table with `guestlist migrate --database URL` \
         or Inbox::migrate(&pool), a key table with SqlKeyStore::migrate() (`guestlist gateway` \
         makes its own at start), an outbox with `guestlist migrate --outbox --database URL` or \
         Outbox::migrate(&pool), or run the SQL in guestlist-sqlx/sql/ yourself"
    )]
    MissingTable {
        /// The table that was looked for.
        table: String,
        /// The database's own error.
        #[source]
        source: sqlx::Error,
    },
    /// A claim or an outgoing message was asked for on a connection with no transaction open:
    /// it would commit on its own, apart from the work, and a crash in between would lose the
    /// work for good (a claim) or publish an event for work that never happened (a message).
    #[error(
        "the claim or the outgoing message needs a transaction: begin one (Inbox::begin(&pool) \
         or pool.begin()) and pass `&mut *tx`, so that it commits together with the handler's \
         writes"
    )]
    NotInTransaction,
    /// SQLite could not give the claim the write lock: its transaction was begun deferred
    /// (`pool.begin()`) and had read first, so it asked for the lock late, while another writer
    /// held it. Running the transaction again can succeed; beginning it with the lock cannot fail.
    #[error(
        "SQLite was busy when the claim asked for the write lock: the transaction was begun \
         deferred (pool.begin()) and had read first; begin it with Inbox::begin(&pool) \
         (BEGIN IMMEDIATE), or let Inbox::process or Inbox::transaction run it, which also retry"
    )]
    DeferredTransaction(#[source] sqlx::Error),
    /// The database refused or failed, or could not be reached.
    #[error("database error: {0}")]
    Database(#[source] sqlx::Error),
    /// The connection failed while a `COMMIT` was on its way: the database may have committed
    /// or not, and no one can tell from here. Do not acknowledge the message or answer the
    /// request as done; its redelivery (or retry) finds out, as a duplicate where it committed
    /// and as fresh work where it did not. Counted as an outage, never as the message's fault.
    #[error(
        "the connection failed while COMMIT was on its way ({0}): the database may have \
         committed or not; do not acknowledge the message or answer the request as done: its \
         redelivery or retry finds out (a duplicate if it committed, fresh work if not)"
    )]
    CommitUnknown(#[source] sqlx::Error),
    /// A stored body could not be sealed or opened ([`Sealing`](crate::Sealing)); the text says
    /// why and what to do.
    #[error("sealed bodies: {0}")]
    Sealing(String),
    /// The broker did not confirm a message the relay published ([`Relay::drain`](crate::Relay::drain));
    /// it stays pending and goes again on the next round.
    #[error("the broker did not confirm a published message, which stays pending: {0}")]
    Publish(#[source] crate::PublishError),
    /// The outbox's shard count can change only while no relay publishes
    /// ([`Outbox::set_shards`](crate::Outbox::set_shards)), and some relays held shards for
    /// the whole wait.
    #[error(
        "relays {} still hold shards of {table}: stop them first (SIGTERM gives their shards back \
         at once; a killed relay's expire after its lease), change the count, then start them \
         again",
        holders.join(", ")
    )]
    ShardsHeld {
        /// The outbox's table.
        table: String,
        /// The relays that held shards when the wait ended.
        holders: Vec<String>,
    },
    /// The statement that carried this request together with others failed
    /// ([`BatchedKeyStore`](crate::BatchedKeyStore)); every request in it gets the same cause.
    #[error(transparent)]
    Shared(std::sync::Arc<Error>),

    /// A step the handler asks for is not the one the journal holds at its place: the
    /// handler's steps changed between two runs of one message (a step renamed, reordered or
    /// removed). Nothing ran and nothing was replayed.
    #[error(
        "step {asked:?} was asked for at place {place} of message {message_id} (handler {handler}), \
         where the journal holds {journaled:?}: the handler's steps changed between two runs of \
         this message (renamed, reordered or removed), and nothing ran or was replayed. Keep a \
         step's name and place while messages that ran it may come back: give changed steps a \
         new handler name, or let the old messages finish first"
    )]
    StepChanged {
        /// The handler.
        handler: String,
        /// The message.
        message_id: String,
        /// The step's place, counted from 0.
        place: usize,
        /// The step the journal holds there.
        journaled: String,
        /// The step the handler asked for.
        asked: String,
    },

    /// Another run took the message over (this run's lease ended first): this run journals and
    /// commits nothing more, and the message's next delivery resumes after what is journaled.
    #[error(
        "another run took message {message_id} of handler {handler} over (this run's lease \
         ended): it journals and commits nothing more; hand the message back, and its next \
         delivery resumes after the steps journaled. A lease that runs out while steps run is \
         too short for them: see Inbox::step_lease"
    )]
    RunTakenOver {
        /// The handler.
        handler: String,
        /// The message.
        message_id: String,
    },

    /// A message of a batch whose steps are journaled together lost its part of the batch's
    /// shared transaction to another message's failure (the database refused one of the
    /// batch's statements, and the whole transaction rolled back).
    #[error(
        "another message's part of the batch failed on the transaction the batch's steps share, \
         and this message's part rolled back with it: hand the message back (uncounted); its next \
         run resumes after the steps journaled before"
    )]
    RolledBackWithBatch,

    /// An idempotency key released after a failure was used again for another request, while
    /// the journal still holds the steps the first request finished.
    #[error(
        "this Idempotency-Key (scope {scope}) began another request whose steps ran partway and \
         are journaled: its steps are not replayed for a different request. Send this request \
         with a new key, or retry the first request as it was to finish it"
    )]
    JournalOfAnotherRequest {
        /// The key's scope, as its digest.
        scope: String,
    },

    /// A step's result is over the journal's bound.
    #[error(
        "step {step:?} returned {bytes} bytes of result, over the journal's {limit}: journal an \
         id and keep the rest in a table of your own"
    )]
    StepResultTooLarge {
        /// The step.
        step: String,
        /// The result's size, serialized.
        bytes: usize,
        /// The bound.
        limit: usize,
    },

    /// A step's result could not be written to the journal, or read back from it as the type
    /// the handler asks for now.
    #[error("step {step:?}'s journaled result: {reason}")]
    StepResult {
        /// The step.
        step: String,
        /// What went wrong.
        reason: String,
    },
}

impl Error {
    /// `true` when running the whole transaction again may succeed: a deadlock, a serialization
    /// failure, or a busy SQLite database. Such an error is never a duplicate.
    pub fn is_retryable(&self) -> bool {
        match self {
            Error::Database(err) => crate::backend::is_retryable(err),
            Error::DeferredTransaction(_) => true,
            Error::Shared(err) => err.is_retryable(),
            _ => false,
        }
    }
}

impl Error {
    /// A database error from a statement on `table`: [`Error::MissingTable`] where the database
    /// says the table is absent.
    pub(crate) fn from_store<DB: crate::Backend>(
        table: &guestlist_core::TableName,
        err: sqlx::Error,
    ) -> Self {
        if DB::is_missing_table(&err) {
            Error::MissingTable {
                table: table.to_string(),
                source: err,
            }
        } else {
            Error::Database(err)
        }
    }

    /// The error of a `COMMIT`: the database's own answer (it did not commit) as
    /// [`Error::Database`]; anything else (the connection closed, a read failed) as
    /// [`Error::CommitUnknown`], since the `COMMIT` may have reached the database.
    pub(crate) fn from_commit(err: sqlx::Error) -> Self {
        if err.as_database_error().is_some() {
            Error::Database(err)
        } else {
            Error::CommitUnknown(err)
        }
    }
}

impl From<sqlx::Error> for Error {
    fn from(err: sqlx::Error) -> Self {
        Error::Database(err)
    }
}
